"""An exception as one line: the one way the course quotes an error, in the kernel and in real processes.

A leaf module (it imports nothing of the course, nor JAX), so a host process of a real run can
import it as cheaply as the judge.
"""
from __future__ import annotations

import re

ERROR_CHARS = 220  # the most of a learner's exception a verdict quotes
_URL = re.compile(r"\(?\b(?:see|See|visit|For more information,? see)?:?\s*https?://\S+\)?\.?")  # a URL and its "see"


def explain(error: BaseException, limit: int = ERROR_CHARS) -> str:
    """'Type: the informative sentence' of an exception, bounded, never cut mid-word, no URLs."""
    name = type(error).__name__
    if name == "TracerArrayConversionError":
        return (f"{name}: numpy was called on a traced JAX array; inside a function that JAX traces "
                "(jit, shard_map, grad), use jax.numpy (jnp) instead of numpy (np)")
    paragraphs = [_URL.sub("", " ".join(p.split())).strip() for p in re.split(r"\n\s*\n", str(error))]
    paragraphs = [p for p in paragraphs if p]
    telling = [p for p in paragraphs if " but " in p]  # JAX's sentence that contrasts want and got
    text = (telling or paragraphs or [""])[0]
    return f"{name}: {shorten(text, limit)}".rstrip(": ")


def shorten(text: str, limit: int = ERROR_CHARS) -> str:
    """`text` cut to at most `limit` characters: after its last whole sentence when that keeps at
    least half of it, else at a word boundary, ending with ' …'."""
    if len(text) <= limit:
        return text
    sentences = text[: limit + 1].rsplit(". ", 1)[0]
    if limit // 2 <= len(sentences) < limit:
        return sentences + "."
    cut = text[: limit - 2].rsplit(" ", 1)[0].rstrip(",;:")
    return cut + " …"
