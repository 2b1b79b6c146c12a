"""Fixed benchmark prompts: plain story openings that SmolLM2 continues for well over 128 greedy tokens
without emitting EOS (checked every run: onnx-genai cannot ignore EOS, so a prompt that ends early would
show up as a token mismatch). Each round uses its own prompt, so no system gets a prefix-cache hit from the
previous round; every system sees the same prompt within a round."""

WARMUP = (
    "A small robot woke up in a junkyard at the edge of a desert city. Its memory was empty except for a "
    "single instruction: find the gardener. It climbed over rusted cars and broken washing machines until it "
    "reached the road, where a delivery truck"
)

PROMPTS = [
    "The lighthouse keeper had not seen a ship in eleven days. Every morning he climbed the two hundred steps, "
    "polished the great lens, and wrote the same line in his logbook: no vessels sighted, weather fair. On the "
    "twelfth morning the fog came in thick and grey, and through it he heard a bell that did not belong to any "
    "buoy he knew. He set down his cup of tea, took the brass telescope from its hook, and stepped out onto the "
    "gallery. What he saw there",
    "Maria opened the old bakery on the corner of Elm Street in the spring of 1952, when the town was still "
    "recovering from the long winter floods. She baked bread before dawn, sold pastries to the children on their "
    "way to school, and kept a ledger of every family that could not pay. Years later, when the mill closed and "
    "half the town moved away, the ledger was found in a tin box under the counter, and the people who read it",
    "Captain Reyes studied the star charts spread across the navigation table while the ship's engines hummed "
    "softly beneath the deck. The colony on the fourth moon had stopped answering three weeks ago, and the "
    "council had sent only one vessel and twelve volunteers to learn why. As the moon grew larger in the "
    "viewport, the sensors picked up a faint signal repeating a single phrase in an old dialect, and the "
    "linguist on board",
    "Deep in the mountains, where the river splits around a black stone the size of a house, there is a village "
    "that appears on no map. Travelers who find it say the people there speak kindly, trade fairly, and never "
    "tell their own names. A young cartographer named Tomas set out one autumn to measure the valley and draw "
    "the first true map of the region, carrying a compass, a notebook, and a letter from the university that",
    "When the museum's night guard retired after forty years, he left a thick envelope for his replacement with "
    "instructions to open it only if the clocks in the east wing ever stopped at the same time. For six months "
    "nothing happened, and the new guard nearly forgot about it. Then, on a quiet Tuesday in November, every "
    "clock in the east wing stopped at exactly three minutes past two, and she",
]

VOLUMES = ["first", "second", "third", "fourth", "fifth", "sixth", "seventh", "eighth", "ninth", "tenth",
           "eleventh", "twelfth"]
SHELVES = ["oak", "pine", "cedar", "maple", "birch", "walnut", "cherry", "ash"]


def long_prompts(tokenizer, count: int, length: int, skip: int = 0) -> list[tuple[str, list[int]]]:
    """`count` distinct prompts of exactly `length` tokens for the concurrency runs.

    Each is a different one-line title (so no two share even their first KV page: no prefix-cache hit
    between them) followed by the six story openings above in a different order, cut at `length`
    tokens. Only cuts whose text re-tokenizes to the same ids are kept (onnx-genai's server takes text).
    `skip` leaves out the first candidates, so each run gets prompts no earlier run used.
    """
    import itertools

    paragraphs = [WARMUP, *PROMPTS]
    orders = list(itertools.permutations(range(len(paragraphs))))
    out: list[tuple[str, list[int]]] = []
    seen = 0
    for k in range(len(orders)):
        order = orders[(k * 97) % len(orders)]  # neighbours differ from the first paragraph on
        title = f"From the {VOLUMES[k % len(VOLUMES)]} volume on the {SHELVES[(k // len(VOLUMES)) % len(SHELVES)]} " \
                f"shelf, story {k + 1}.\n\n"
        ids = tokenizer.encode(title + "\n\n".join(paragraphs[i] for i in order))
        if len(ids) < length:
            raise ValueError(f"prompts hold only {len(ids)} tokens, fewer than {length}")
        ids = ids[:length]
        text = tokenizer.decode(ids)
        if tokenizer.encode(text) != ids:
            continue
        seen += 1
        if seen > skip:
            out.append((text, ids))
        if len(out) == count:
            return out
    raise ValueError(f"could not make {count} prompts of {length} tokens")
