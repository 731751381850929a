"""The `search` tool: web search through SearXNG or DuckDuckGo's Instant Answer API.

The backend is chosen by `settings.search_backend`. SearXNG (self-hosted, JSON output
enabled) gives real web results; DuckDuckGo's keyless API answers only well-known
topics, which is why it is the fallback rather than the recommendation.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from jarvis_agents.errors import ToolError
from jarvis_agents.tools.base import ToolContext
from jarvis_agents.tools.http import fetch_json

MAX_RESULTS = 5
MAX_QUERY_CHARS = 300
MAX_SNIPPET_CHARS = 300


@dataclass(frozen=True)
class SearchHit:
    """One result as the model sees it."""

    title: str
    url: str
    snippet: str


class SearchTool:
    """Searches the web and returns the top results as numbered lines."""

    name = "search"
    description = (
        "Search the web for facts, news or pages. Returns up to five results, each with "
        "a title, a URL and a short snippet."
    )
    input_hint = "a short search query, e.g. population of Canada 2024"
    input_parameter = "query"  # its schema: {"query": string}, required

    def run(self, tool_input: str, *, context: ToolContext) -> str:
        query = " ".join(tool_input.split()).strip("`'\"")
        if not query:
            raise ToolError("Give a search query, e.g. tallest building in Europe.")
        if len(query) > MAX_QUERY_CHARS:
            raise ToolError(f"A search query is at most {MAX_QUERY_CHARS} characters; shorten it.")
        settings = context.settings
        if settings.search_backend == "searxng":
            if not settings.searxng_url:
                # Why an observation, not a crash: the agent can still answer without search.
                raise ToolError("Web search is not configured (set JARVIS_SEARXNG_URL).")
            hits = _searxng(query, context, settings.searxng_url)
        else:
            hits = _duckduckgo(query, context, settings.duckduckgo_url)
        if not hits:
            return f"No results found for {query!r}. Try fewer or different words."
        return format_hits(hits[:MAX_RESULTS])


def format_hits(hits: list[SearchHit]) -> str:
    """Numbered "title — url" lines, each followed by its indented snippet."""
    lines: list[str] = []
    for number, hit in enumerate(hits, start=1):
        lines.append(f"{number}. {hit.title} — {hit.url}" if hit.url else f"{number}. {hit.title}")
        if hit.snippet:
            lines.append(f"   {hit.snippet}")
    return "\n".join(lines)


def _clean(text: object, limit: int = MAX_SNIPPET_CHARS) -> str:
    if not isinstance(text, str):
        return ""
    plain = " ".join(re.sub(r"<[^>]+>", " ", text).split())  # stray HTML tags, if any
    return plain if len(plain) <= limit else plain[: limit - 1].rstrip() + "…"


def _searxng(query: str, context: ToolContext, base_url: str) -> list[SearchHit]:
    data = fetch_json(
        context.http,
        base_url.rstrip("/") + "/search",
        params={"q": query, "format": "json"},
        service="the search service (SearXNG)",
        timeout_s=context.timeout_s,
    )
    results = data.get("results") if isinstance(data, dict) else None
    if not isinstance(results, list):
        raise ToolError("The search service (SearXNG) sent an answer without results; try again.")
    hits = []
    for item in results:
        if isinstance(item, dict) and isinstance(item.get("url"), str):
            title = _clean(item.get("title"), 200) or item["url"]
            hits.append(SearchHit(title, item["url"], _clean(item.get("content"))))
        if len(hits) == MAX_RESULTS:
            break
    return hits


def _duckduckgo(query: str, context: ToolContext, url: str) -> list[SearchHit]:
    data = fetch_json(
        context.http,
        url,
        params={"q": query, "format": "json", "no_html": 1, "skip_disambig": 1},
        service="the search service (DuckDuckGo)",
        timeout_s=context.timeout_s,
    )
    if not isinstance(data, dict):
        raise ToolError("The search service (DuckDuckGo) sent an answer of an unexpected shape.")
    hits: list[SearchHit] = []
    abstract = _clean(data.get("AbstractText"))
    if abstract:
        title = _clean(data.get("Heading"), 200) or query
        hits.append(SearchHit(title, str(data.get("AbstractURL") or ""), abstract))
    answer = _clean(data.get("Answer"))
    if answer:
        hits.append(SearchHit("Instant answer", "", answer))
    for topic in _flatten_topics(data.get("RelatedTopics")):
        text, first_url = topic.get("Text"), topic.get("FirstURL")
        if isinstance(text, str) and text and isinstance(first_url, str):
            # DuckDuckGo writes "Title - description" in one field.
            title, _, snippet = text.partition(" - ")
            hits.append(SearchHit(_clean(title, 200), first_url, _clean(snippet)))
        if len(hits) >= MAX_RESULTS:
            break
    return hits


def _flatten_topics(topics: object) -> list[dict[str, object]]:
    """RelatedTopics holds results and groups {"Name", "Topics": [...]}; flatten one level."""
    flat: list[dict[str, object]] = []
    for topic in topics if isinstance(topics, list) else []:
        if not isinstance(topic, dict):
            continue
        if isinstance(topic.get("Topics"), list):
            flat.extend(t for t in topic["Topics"] if isinstance(t, dict))
        else:
            flat.append(topic)
    return flat
