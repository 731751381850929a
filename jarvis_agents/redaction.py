"""Secrets kept out of what the system shows: URLs in reports anyone may read, and the
passwords and query strings of URLs in reprs (a log line, a traceback)."""

from __future__ import annotations

import re
from urllib.parse import urlsplit

HIDDEN = "***"
URL_SHOWN_AS = "<url>"

# A URL with a scheme (http://…, postgresql+psycopg2://…, redis://…), up to a space or
# a quote; then what may be left of one without a scheme: user:password@, ?query.
_URL = re.compile(r"[a-zA-Z][a-zA-Z0-9+.-]*://[^\s'\"<>]*[^\s'\"<>.,:;)]")
_USERINFO = re.compile(r"[^\s/@'\"<>()]+:[^\s/@'\"<>()]*@")
_QUERY = re.compile(r"\?[^\s'\"<>]*=[^\s'\"<>]*")


def without_urls(text: str) -> str:
    """`text` with every URL, credential (`user:pass@`) and query string taken out: for
    what anyone may read, such as /readyz (README, HTTP API)."""
    text = _URL.sub(URL_SHOWN_AS, text)
    text = _USERINFO.sub("", text)
    return _QUERY.sub("", text)


def redacted_url(url: str) -> str:
    """`url` with its password and its query string hidden; the rest (scheme, host,
    path) kept, which is what someone reading a repr needs."""
    try:
        parts = urlsplit(url)
        password = parts.password
    except ValueError:
        return HIDDEN
    if password is None and not parts.query and not parts.fragment:
        return url
    netloc = parts.netloc
    if password is not None:
        user, _, host = netloc.rpartition("@")
        netloc = f"{user.partition(':')[0]}:{HIDDEN}@{host}"
    return f"{parts.scheme}://{netloc}{parts.path}" + (f"?{HIDDEN}" if parts.query else "")
