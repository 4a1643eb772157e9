"""The task handlers of the ``digest`` workflow (``digest.json``): fetch → summarise → publish.

A worker loads them with ``--app digest_tasks`` (run it in this folder, or a copy of it:
the current folder comes first on the path). Each is registered under its default name,
``digest_tasks:FUNCTION``, which is what ``digest.json`` names; a worker can also import
such a name on demand.

No network: ``fetch`` reads feed files from a local folder (``feeds/`` ships two made-up
ones), RSS 2.0 (``*.xml``) or JSON Feed (``*.json``). Everything is deterministic, so a
node that runs twice (rowfleet delivers at least once) gives the same result, and
``publish`` replaces its file atomically. Paths are relative to the worker's folder.

Stdlib and the public ``rowfleet`` API only.
"""

from __future__ import annotations

import json
import os
import re
import xml.etree.ElementTree as ElementTree

import rowfleet

# The first sentence: text up to the first . ! or ? that ends a word.
_SENTENCE = re.compile(r"\s*(.+?[.!?])(?=\s|$)", re.S)


@rowfleet.task
def fetch(folder: str) -> dict:
    """Every article of every feed file in ``folder``, files in name order.

    Returns ``{"feeds": [file names], "items": [{"feed", "title", "link", "text"}, ...]}``;
    ``items`` is empty when the folder holds no feed files (``digest.json`` then skips
    publishing). A folder that does not exist is an error, so the node retries and fails.
    """
    names = sorted(name for name in os.listdir(folder) if name.endswith((".xml", ".json")))
    items: list[dict] = []
    for name in names:
        path = os.path.join(folder, name)
        items.extend(_read_json_feed(path) if name.endswith(".json") else _read_rss(path))
    return {"feeds": names, "items": items}


@rowfleet.task
def summarise(article: dict) -> dict:
    """One article in brief: its first sentence and how many words the whole text has."""
    text = " ".join(article["text"].split())
    match = _SENTENCE.match(text)
    return {"feed": article["feed"], "title": article["title"], "link": article["link"],
            "summary": match.group(1) if match else text, "words": len(text.split())}


@rowfleet.task
def publish(summaries: list, out: str) -> dict:
    """Write the digest (Markdown) to ``out``, replacing it whole; its absolute path and size."""
    lines = ["# Digest", ""]
    feed = None
    for entry in summaries:
        if entry["feed"] != feed:
            feed = entry["feed"]
            lines += ["", f"## {feed}", ""] if len(lines) > 2 else [f"## {feed}", ""]
        lines.append(f"- [{entry['title']}]({entry['link']}) ({entry['words']} words): {entry['summary']}")
    partial = f"{out}.partial"
    with open(partial, "w", encoding="utf-8") as handle:
        handle.write("\n".join(lines) + "\n")
    os.replace(partial, out)  # a reader sees the old digest or the new one, never half of one
    return {"path": os.path.abspath(out), "articles": len(summaries)}


def _read_rss(path: str) -> list[dict]:
    channel = ElementTree.parse(path).getroot().find("channel")
    if channel is None:
        raise ValueError(f"{path}: not an RSS 2.0 feed (no <channel>)")
    feed = channel.findtext("title", "").strip() or os.path.basename(path)
    return [{"feed": feed, "title": item.findtext("title", "").strip(), "link": item.findtext("link", "").strip(),
             "text": item.findtext("description", "").strip()} for item in channel.iter("item")]


def _read_json_feed(path: str) -> list[dict]:
    with open(path, encoding="utf-8") as handle:
        data = json.load(handle)
    feed = str(data.get("title") or os.path.basename(path))
    return [{"feed": feed, "title": str(item.get("title", "")), "link": str(item.get("url", "")),
             "text": str(item.get("content_text", ""))} for item in data.get("items", [])]
