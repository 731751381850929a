"""Webhooks: the agent JSON POSTed to the caller's URL when the agent ends or waits
(README, Webhooks).

    addresses.py   where a webhook may go: the URL parsed, resolved, checked and pinned
    signing.py     the headers of a try: X-Jarvis-Signature and Standard Webhooks'
    deadlines.py   a whole try over within its deadline, however the receiver trickles
    sender.py      one try over HTTP, to the pinned address
    turns.py       claimed tries waiting for a sender, users in turns, a few of each at most
    dispatcher.py  in every worker: claims due deliveries, tries them, keeps the schedule

What is owed, and its body, is recorded by the status change itself (store/outbox.py);
a failed delivery never changes the agent.
"""
