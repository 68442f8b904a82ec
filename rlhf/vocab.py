"""Vocabulary of SPEC §1: 40 tokens, ids in a fixed order, and encode/decode of prompts and responses."""
FAMILIES = ("anvil", "birch", "cobalt", "dune", "ember", "fjord")
CONTENT = tuple("ba da fa ga ha ja ka la ma na pa ra sa ta va wa za be de fe ge he je ke".split())
N_ATTRS, N_VALUES = 4, 8
PROMPT_LEN, RESP_LEN = 6, 8
SEQ_LEN = PROMPT_LEN + RESP_LEN

TOKENS = ("<pad>", "<sep>") + tuple(f"<{f}>" for f in FAMILIES) + tuple(f"v{i}" for i in range(N_VALUES)) + CONTENT
VOCAB_SIZE = len(TOKENS)
TOKEN_ID = {t: i for i, t in enumerate(TOKENS)}
PAD, SEP = TOKEN_ID["<pad>"], TOKEN_ID["<sep>"]
FAMILY_ID = {f: TOKEN_ID[f"<{f}>"] for f in FAMILIES}
VALUE0 = TOKEN_ID["v0"]
CONTENT0 = TOKEN_ID[CONTENT[0]]          # content tokens occupy ids CONTENT0 .. VOCAB_SIZE-1
N_CONTENT = len(CONTENT)
CONTENT_ID = {t: CONTENT0 + i for i, t in enumerate(CONTENT)}
assert VOCAB_SIZE == 40 and CONTENT0 == 16


def encode_prompt(family: str, attrs) -> list[int]:
    """[<family>, v_a1, v_a2, v_a3, v_a4, <sep>]"""
    if family not in FAMILY_ID:
        raise ValueError(f"unknown family {family!r}; expected one of {', '.join(FAMILIES)}")
    if len(attrs) != N_ATTRS or any(not (0 <= int(a) < N_VALUES) for a in attrs):
        raise ValueError(f"attrs must be {N_ATTRS} integers in 0..{N_VALUES - 1}, got {attrs!r}")
    return [FAMILY_ID[family]] + [VALUE0 + int(a) for a in attrs] + [SEP]


def decode_prompt(ids) -> tuple[str, list[int]]:
    ids = [int(i) for i in ids]
    family = TOKENS[ids[0]][1:-1]
    return family, [i - VALUE0 for i in ids[1:1 + N_ATTRS]]


def encode_response(tokens) -> list[int]:
    if len(tokens) != RESP_LEN:
        raise ValueError(f"a response has {RESP_LEN} tokens, got {len(tokens)}")
    bad = [t for t in tokens if t not in CONTENT_ID]
    if bad:
        raise ValueError(f"token(s) {bad!r} are not content tokens ({' '.join(CONTENT)})")
    return [CONTENT_ID[t] for t in tokens]


def decode_response(ids) -> list[str]:
    return [TOKENS[int(i)] for i in ids]
