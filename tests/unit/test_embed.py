"""Embedders: the local hashing embedder, and the OpenAI-compatible client against a
real HTTP server on 127.0.0.1."""

from __future__ import annotations

import hashlib
import json
import math
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from chatmem.embedding import Embedder, HashingEmbedder, OpenAIEmbedder
from chatmem.errors import EmbeddingError, ValidationError
from chatmem.http import HTTPResponse, MockTransport
from chatmem.index import DuckDBEngine, QueryIndex, search


def cos(a, b):
    return sum(x * y for x, y in zip(a, b))


class FakeEmbeddings:
    """An OpenAI-compatible /embeddings server with scripted failures."""

    def __init__(self, dims=4, fail_first=0, fail_status=500, wrong_dims=None):
        self.dims, self.fail_first, self.fail_status, self.wrong_dims = (
            dims,
            fail_first,
            fail_status,
            wrong_dims,
        )
        self.requests: list[dict] = []
        self.auth: list[str | None] = []
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *a):
                pass

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                fake.requests.append(body)
                fake.auth.append(self.headers.get("Authorization"))
                if self.path != "/v1/embeddings":
                    self.send_response(404)
                    self.end_headers()
                    return
                if fake.fail_first > 0:
                    fake.fail_first -= 1
                    out = b'{"error": {"message": "try again"}}'
                    self.send_response(fake.fail_status)
                    self.send_header("Content-Length", str(len(out)))
                    self.end_headers()
                    self.wfile.write(out)
                    return
                n = fake.wrong_dims or fake.dims
                data = [
                    {"object": "embedding", "index": i, "embedding": [float(len(t) + j) for j in range(n)]}
                    for i, t in enumerate(body["input"])
                ]
                out = json.dumps({"object": "list", "data": data[::-1], "model": body["model"]}).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(out)))
                self.end_headers()
                self.wfile.write(out)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/v1"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.server.shutdown()
        self.server.server_close()
        self.thread.join()


async def test_openai_embedder_batches_requests_and_keeps_order():
    """Texts go out batch_size at a time with the model and key; vectors come back in input order."""
    with FakeEmbeddings(dims=4) as srv:
        emb = OpenAIEmbedder(srv.url, api_key="sk-test", model="m1", dimensions=4, batch_size=2)
        vecs = await emb.embed(["a", "bb", "ccc", "dddd", "eeeee"])
    assert [b["input"] for b in srv.requests] == [["a", "bb"], ["ccc", "dddd"], ["eeeee"]]
    assert all(b["model"] == "m1" and b["dimensions"] == 4 for b in srv.requests)
    assert srv.auth == ["Bearer sk-test"] * 3
    assert [v[0] for v in vecs] == [1.0, 2.0, 3.0, 4.0, 5.0]
    assert isinstance(emb, Embedder)


async def test_openai_embedder_retries_a_500_then_succeeds():
    """A 500 is retried with backoff; the second answer is used."""
    with FakeEmbeddings(dims=3, fail_first=1) as srv:
        emb = OpenAIEmbedder(srv.url, model="m", dimensions=3, backoff=0.01)
        vecs = await emb.embed(["hi"])
    assert len(srv.requests) == 2 and vecs == [[2.0, 3.0, 4.0]]


async def test_openai_embedder_gives_up_after_max_retries():
    """Persistent 503s end in EmbeddingError carrying the status, after max_retries + 1 tries."""
    with FakeEmbeddings(fail_first=10, fail_status=503) as srv:
        emb = OpenAIEmbedder(srv.url, model="m", dimensions=4, max_retries=2, backoff=0.01)
        with pytest.raises(EmbeddingError) as e:
            await emb.embed(["hi"])
    assert e.value.status == 503 and len(srv.requests) == 3


async def test_openai_embedder_does_not_retry_a_client_error():
    """A 404 (wrong base_url) fails at once, naming the status."""
    with FakeEmbeddings() as srv:
        emb = OpenAIEmbedder(srv.url.replace("/v1", "/nope"), model="m", dimensions=4, backoff=0.01)
        with pytest.raises(EmbeddingError, match="404"):
            await emb.embed(["hi"])
    assert len(srv.requests) == 1


async def test_openai_embedder_wrong_dimension_is_a_clear_error():
    """Vectors of another size than configured raise EmbeddingError naming both sizes."""
    with FakeEmbeddings(dims=4, wrong_dims=3) as srv:
        emb = OpenAIEmbedder(srv.url, model="m", dimensions=4)
        with pytest.raises(EmbeddingError, match="3 dimensions, expected 4"):
            await emb.embed(["hi"])


async def test_openai_embedder_learns_unknown_dimensions_and_feeds_semantic_search():
    """With dimensions=None and an unknown model the size is learned; the index stores model and dim."""
    with FakeEmbeddings(dims=5) as srv:
        emb = OpenAIEmbedder(srv.url, model="local-model", batch_size=8)
        assert emb.dimensions == 0

        async def run():
            index = QueryIndex(DuckDBEngine())
            await index.apply(
                "session-created", "s", {"sessionId": "s", "title": "", "createdAt": 0, "updatedAt": 0}
            )
            await index.apply(
                "messages-appended",
                "s",
                [
                    {
                        "id": f"m{i}",
                        "sessionId": "s",
                        "seq": i,
                        "role": "user",
                        "content": "x" * (i + 1),
                        "createdAt": i,
                    }
                    for i in range(3)
                ],
            )
            hits = await search(index, "xx", mode="semantic", embedder=emb, limit=3)
            rows = await index.sql("SELECT DISTINCT model, dim FROM embeddings")
            await index.close()
            return hits, rows

        hits, rows = await run()
    assert emb.dimensions == 5
    assert rows == [{"model": "local-model", "dim": 5}]
    assert len(hits) == 3


async def test_openai_embedder_retries_transport_errors_through_an_injected_transport():
    """A transport error then a 200: retried through the injected transport."""
    from chatmem.errors import TransportError

    calls = []

    def handler(method, url, headers, body):
        calls.append(url)
        if len(calls) == 1:
            raise TransportError("connection refused")
        n = len(json.loads(body)["input"])
        return HTTPResponse(
            200, {}, json.dumps({"data": [{"index": i, "embedding": [1.0, 0.0]} for i in range(n)]}).encode()
        )

    emb = OpenAIEmbedder(
        "http://example.invalid/v1", model="m", dimensions=2, backoff=0.0, transport=MockTransport(handler)
    )
    assert (await emb.embed(["a", "b"])) == [[1.0, 0.0], [1.0, 0.0]]
    assert calls == ["http://example.invalid/v1/embeddings"] * 2


def test_openai_embedder_validates_its_settings():
    """Bad settings raise ValidationError before any request."""
    for kwargs in (
        {"base_url": "ftp://x"},
        {"base_url": "http://x", "batch_size": 0},
        {"base_url": "http://x", "max_retries": -1},
    ):
        with pytest.raises(ValidationError):
            OpenAIEmbedder(**kwargs)


# --------------------------------------------------------------------------- hashing


async def test_hashing_embedder_is_unit_length_and_deterministic():
    """Vectors are l2-normalised and pinned: the same on every run and platform."""
    emb = HashingEmbedder()
    (v,) = await emb.embed(["Hello, world! Ça va?"])
    assert len(v) == 384 and abs(math.sqrt(sum(x * x for x in v)) - 1) < 1e-9
    digest = hashlib.sha256(json.dumps([round(x, 6) for x in v]).encode()).hexdigest()
    assert digest == PINNED_DIGEST, digest
    assert emb.model == "hashing-v1-384"
    assert HashingEmbedder(64).model == "hashing-v1-64"


async def test_hashing_embedder_ranks_a_near_duplicate_above_unrelated_text():
    """A reworded near-duplicate is closer to the query than unrelated text."""
    emb = HashingEmbedder()
    q, para, other = await emb.embed(
        [
            "How do I reset my password for the account?",
            "how can I reset the password of my account",
            "The weather in Lisbon is sunny and warm today.",
        ]
    )
    assert cos(q, para) > 0.5 > cos(q, other)
    assert cos(q, para) > cos(q, other) + 0.3


async def test_hashing_embedder_handles_empty_and_cjk_text():
    """Empty text gives a zero vector; CJK text overlaps with itself."""
    emb = HashingEmbedder(dimensions=128)
    empty, a, b, c = await emb.embed(["", "東京タワーに行きました", "東京タワーへ行った", "안녕하세요"])
    assert empty == [0.0] * 128
    assert cos(a, b) > cos(a, c)


def test_hashing_embedder_validates_dimensions():
    """Too few dimensions is a ValidationError."""
    with pytest.raises(ValidationError):
        HashingEmbedder(dimensions=4)


PINNED_DIGEST = "cbb4605ab0ff0b266e1d9ed67cc49fe6b9013b7355f63264d4d64bef8ae66dd9"
