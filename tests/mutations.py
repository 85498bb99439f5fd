"""Random edits of a text for the reader's fuzz tests, the same for the same `random.Random`."""

import random


def mutated(
    text: str, rng: random.Random, alphabet: list[str], max_edits: int, substitute: float
) -> str:
    """`text` with 1 to `max_edits` characters replaced by an `alphabet` token (with probability
    `substitute`) or deleted."""
    chars = list(text)
    for _ in range(rng.randint(1, max_edits)):
        at = rng.randrange(len(chars))
        if rng.random() < substitute:
            chars[at] = rng.choice(alphabet)
        else:
            del chars[at]
    return "".join(chars)
