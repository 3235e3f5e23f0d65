"""A scripted "model" for RULER's prompts (a helper of tests/harness/fake_server.py, not a test).

It reads only the last ``reach`` tokens of the prompt (byte tokens, as the fake server counts) and answers what a
model with that much usable context would: the values of the asked keys whose needles it sees, the chain of
variables it can follow, the most frequent words it counts. So scores are known in advance and fall with length:
a needle-in-a-haystack task fails once its needle is further than ``reach``, the aggregation tasks (cwe, fwe) once
the counts they see no longer rank the words as the whole list does.
"""

from __future__ import annotations

import re
from collections import Counter

QUESTION = re.compile(r"What (?:are all|is) the special magic \w+ for (.+?) mentioned in the provided text\?")
NEEDLE = re.compile(r"One of the special magic \w+ for (\S+) is: (\S+)\.")


def is_ruler(prompt: str) -> bool:
    return "special magic" in prompt or "chain(s) of variable" in prompt or "coded text" in prompt or \
        "numbered list of words" in prompt


def visible(prompt: str, reach: int) -> str:
    """The last ``reach`` byte tokens of the prompt (the part the scripted model uses)."""
    data = prompt.encode("utf-8")
    return data[max(len(data) - reach, 0):].decode("utf-8", errors="ignore") if reach < len(data) else prompt


def answer(prompt: str, reach: int) -> str:
    seen = visible(prompt, reach)
    if "special magic" in prompt:
        asked = QUESTION.findall(prompt)
        keys = re.split(r", and |, ", asked[-1]) if asked else []
        found = [v for k, v in NEEDLE.findall(seen) if k in keys]
        return " " + ", ".join(found) if found else " none"
    if "chain(s) of variable" in prompt:
        value = re.findall(r"assigned the value (\d+) in the text above", prompt)[-1]
        body = seen.split("\n\n\n\n")[-1]
        names = re.findall(rf"VAR ([A-Z]+) = {value}", body)
        while names:
            more = [n for n in re.findall(rf"VAR ([A-Z]+) = VAR {names[-1]} ", body) if n not in names]
            if not more:
                break
            names.append(more[0])
        return " " + " ".join(names)
    if "numbered list of words" in prompt:
        listing = seen.split("most often.\n")[-1].split("\nQuestion:")[0]
        words = Counter(re.split(r"(?:^| )\d+\. ", listing)[1:])
        return " " + " ".join(f"{i + 1}. {w}" for i, (w, _) in enumerate(words.most_common(10)))
    text = seen.split("coded words. ")[-1].split("\nQuestion")[0]
    ranked = [w for w, _ in Counter(text.split()).most_common() if w != "..."]
    return " " + " ".join(ranked[:3])

