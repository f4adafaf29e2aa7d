"""The import graph: layers without upward arrows, no cycles, frameworks only where they belong.

Every `import` statement in the packages counts: those inside functions and those under
`if TYPE_CHECKING:` too (a type-level cycle is still a cycle a reader has to untangle).
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("specguard", "specguard_core", "specguard_bench", "specguard_integrations")

# Lower number = lower layer; a module may import its own layer or lower ones only.
CORE_LAYERS = {
    "specguard_core.config": 0,  # its modules and the package re-exporting them
    "specguard_core.types": 0, "specguard_core.verifiers": 0,
    "specguard_core.flags": 0,  # command-line flags from pydantic fields (argparse, pydantic)
    # the folders' own __init__ modules import nothing
    "specguard_core.text": 0, "specguard_core.concurrency": 0, "specguard_core.cache": 0,
    "specguard_core.remote": 0, "specguard_core.engine.verify": 0, "specguard_core.engine.run": 0,
    "specguard_core.decoding": 0,
    "specguard_core.models": 1,
    "specguard_core.text.errors": 0, "specguard_core.text.tool_choice": 1,
    "specguard_core.text.steps": 1, "specguard_core.text.chat": 1,
    "specguard_core.text.schema": 1, "specguard_core.text.formats": 1,
    "specguard_core.text.messages": 1, "specguard_core.text.tool_calls": 1,
    "specguard_core.text.tokens": 0, "specguard_core.text.logprobs": 1,
    "specguard_core.concurrency.cpu_runner": 2, "specguard_core.concurrency.turns": 2,
    "specguard_core.engine.verify.signals": 2, "specguard_core.decoding.sampling": 2,
    "specguard_core.decoding.logprobs": 2,
    "specguard_core.decoding.reply_grammar": 2, "specguard_core.decoding.answer_check": 2,
    "specguard_core.remote.deadline": 2, "specguard_core.engine.verify.fingerprint": 2,
    "specguard_core.cache.capture": 3, "specguard_core.cache.state": 3,
    "specguard_core.cache.model": 3, "specguard_core.llamacpp": 0,
    "specguard_core.llamacpp.context": 2, "specguard_core.llamacpp.handle": 4,
    "specguard_core.llamacpp.load": 4,
    "specguard_core.cache.handle": 3, "specguard_core.cache.batching": 3,
    "specguard_core.concurrency.padded": 4, "specguard_core.remote.http": 4,
    "specguard_core.text.step_text": 4, "specguard_core.engine.verify.bounds": 4,
    "specguard_core.decoding.guesses": 4,
    "specguard_core.decoding.proposal": 5,
    "specguard_core.engine.proposer": 5, "specguard_core.engine.selector": 5,
    "specguard_core.engine.speculative": 5, "specguard_core.remote.served": 5,
    "specguard_core.engine.verify.cards": 5, "specguard_core.engine.verify.registry": 5,
    "specguard_core.engine.verify.verifier": 5, "specguard_core.engine.accept": 5,
    "specguard_core.engine.plan": 6, "specguard_core.concurrency.rounds": 6,
    "specguard_core.concurrency.leader": 6,
    "specguard_core.concurrency.batcher": 6,
    "specguard_core.remote.target": 6,
    "specguard_core.engine.request": 7, "specguard_core.engine.fallback": 7,
    "specguard_core.engine.stream": 7, "specguard_core.engine.check": 7,
    "specguard_core.engine.judge": 7, "specguard_core.remote.load": 7,
    "specguard_core.engine.run.step": 8, "specguard_core.engine.run.grammars": 8,
    "specguard_core.engine.run.start": 8,
    "specguard_core.engine.run.prompt": 8,
    "specguard_core.engine.loop": 9, "specguard_core.engine.aio": 9,
    "specguard_core.engine": 10,  # the package's lazy re-exports
    "specguard_core.testing": 11,
    "specguard_core": 12,  # the package's lazy re-exports
}
# Folders of the core that never import another, whatever the modules' layers: `decoding/` (the
# sampling, prompt lookup and a proposal's data) sits below both the served target and the engine, `remote/`
# below the engine that drives it.
CORE_FOLDERS_BELOW = {
    "specguard_core.decoding": ("specguard_core.engine", "specguard_core.remote"),
    "specguard_core.remote": ("specguard_core.engine",),
    "specguard_core.llamacpp": ("specguard_core.engine", "specguard_core.remote"),
}
# Inside the bench, from the bottom: what every mode shares, the modes (concurrency serves the
# reasoning problems, the agents grade GSM8K answers, the verifier's data uses the reasoning prompt),
# the command line over them all.
BENCH_LAYERS = {
    "specguard_bench.common": 0,
    "specguard_bench.reasoning": 1, "specguard_bench.synthetic": 1,
    "specguard_bench.concurrency": 2, "specguard_bench.tool_calling": 2,
    "specguard_bench.verifier": 2,
    "specguard_bench.cli": 3,
    "specguard_bench": 4,  # the package's own __init__ and __main__
}
# The server, from the bottom: OpenAI's wire format (pure), the HTTP layer (settings, admission,
# middlewares, errors), running a request through the engine, the app that wires them; the
# command line above it.
SERVE_LAYERS = {
    "specguard.serve.api": 0,
    "specguard.serve.http": 1,
    "specguard.serve.running": 2,
    "specguard.serve.app": 3,
    "specguard.serve": 4,  # the package's own __init__ (imports nothing)
    "specguard.cli": 5,
}
# the bench measures agents through the adapters, so it sits above them
PACKAGE_LAYERS = {"specguard_core": 0, "specguard_integrations": 1, "specguard_bench": 2,
                  "specguard": 3}
# Each framework is imported only by its adapter's subpackage (the shared `common` and `fields`
# import neither) and by the bench module that runs agents on it.
FRAMEWORK_HOMES = {
    ("langchain", "langgraph"): ("specguard_integrations.langchain",
                                 "specguard_bench.tool_calling.agents_bench"),
    ("llama_index",): ("specguard_integrations.llama_index",
                       "specguard_bench.tool_calling.agents_bench"),
}
ADAPTERS = ("specguard_integrations.langchain", "specguard_integrations.llama_index")


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _modules() -> dict[str, Path]:
    return {_module_name(p): p for pkg in PACKAGES for p in (ROOT / pkg).rglob("*.py")}


def _imports(path: Path, modules: dict[str, Path]) -> set[str]:
    tree = ast.parse(path.read_text())
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            for a in node.names:
                sub = f"{node.module}.{a.name}"
                found.add(sub if sub in modules else node.module)
    return found


def _graph() -> dict[str, set[str]]:
    modules = _modules()
    return {name: _imports(path, modules) for name, path in modules.items()}


def _layer(module: str, layers: dict[str, int] = CORE_LAYERS) -> int | None:
    best = max((k for k in layers if module == k or module.startswith(k + ".")),
               key=len, default=None)
    return None if best is None else layers[best]


def test_core_never_imports_frameworks_bench_or_cli() -> None:
    banned = ("langchain", "llama_index", "langgraph", "specguard_bench", "specguard_integrations",
              "specguard.", "fastapi")
    bad = [(m, i) for m, imps in _graph().items() if m.startswith("specguard_core")
           for i in imps if i.startswith(banned) or i == "specguard"]
    assert not bad, bad


def _inside(module: str, homes: tuple[str, ...]) -> bool:
    return any(module == h or module.startswith(h + ".") for h in homes)


def test_frameworks_only_in_their_adapter() -> None:
    graph = _graph()
    assert {a + ".convert" for a in ADAPTERS} <= set(graph)
    bad = [(module, imp) for module, imports in graph.items() for imp in imports
           for roots, homes in FRAMEWORK_HOMES.items()
           if imp.split(".")[0].startswith(roots) and not _inside(module, homes)]
    assert not bad, f"import the framework only in its adapter: {bad}"
    crossed = [(module, imp) for module, imports in graph.items() for imp in imports
               for a, b in (ADAPTERS, ADAPTERS[::-1]) if _inside(module, (a,)) and _inside(imp, (b,))]
    assert not crossed, f"the adapters never import each other: {crossed}"


def test_no_upward_arrows() -> None:
    bad = []
    for module, imports in _graph().items():
        pkg = module.split(".")[0]
        for imp in imports:
            ipkg = imp.split(".")[0]
            if ipkg in PACKAGE_LAYERS and PACKAGE_LAYERS[ipkg] > PACKAGE_LAYERS[pkg]:
                bad.append((module, imp))
            if pkg == ipkg and pkg in ("specguard_core", "specguard_bench", "specguard"):
                layers = {"specguard_core": CORE_LAYERS, "specguard_bench": BENCH_LAYERS,
                          "specguard": SERVE_LAYERS}[pkg]
                src, dst = _layer(module, layers), _layer(imp, layers)
                if src is not None and dst is not None and dst > src:
                    bad.append((module, imp))
    assert not bad, bad


def test_core_folder_order() -> None:
    graph = _graph()
    assert any(m.startswith("specguard_core.remote.") for m in graph)
    bad = [(module, imp) for module, imports in graph.items()
           for folder, above in CORE_FOLDERS_BELOW.items()
           if module == folder or module.startswith(folder + ".")
           for imp in imports if imp.startswith(tuple(f"{a}." for a in above)) or imp in above]
    assert not bad, f"these folders must not import the ones above them: {bad}"


def test_no_cycles() -> None:
    graph = {m: {i for i in imps if i in _modules()} for m, imps in _graph().items()}
    state: dict[str, int] = {}

    def visit(node: str, path: list[str]) -> None:
        state[node] = 1
        for nxt in graph.get(node, ()):
            if nxt == node or nxt.startswith(node + "."):  # a package re-exporting its own parts
                continue
            if state.get(nxt) == 1:
                pytest.fail(f"import cycle: {' -> '.join(path + [node, nxt])}")
            if nxt not in state:
                visit(nxt, path + [node])
        state[node] = 2

    for module in sorted(graph):
        if module not in state:
            visit(module, [])


def test_every_core_module_has_a_layer() -> None:
    missing = [m for m in _modules() if m.startswith("specguard_core") and _layer(m) is None]
    assert not missing, f"add {missing} to CORE_LAYERS"


def test_every_bench_folder_has_a_layer_and_an_import_free_init() -> None:
    bench = ROOT / "specguard_bench"
    folders = sorted(_module_name(p.parent / "__init__.py") for p in bench.rglob("__init__.py"))
    missing = [f for f in folders if f not in BENCH_LAYERS]
    assert not missing, f"add {missing} to BENCH_LAYERS"
    modules = _modules()
    heavy = [f for f in folders
             if {i for i in _imports(modules[f], modules) if i != "__future__"}]
    assert not heavy, f"keep these __init__ modules import-free: {heavy}"


def test_every_serve_folder_has_a_layer_and_an_import_free_init() -> None:
    serve = ROOT / "specguard" / "serve"
    modules = _modules()
    names = sorted(m for m in modules if m.startswith("specguard.serve"))
    assert len(names) > 10
    missing = [m for m in names if _layer(m, SERVE_LAYERS) is None]
    assert not missing, f"add {missing} to SERVE_LAYERS"
    folders = sorted(_module_name(p) for p in serve.rglob("__init__.py"))
    heavy = [f for f in folders if {i for i in _imports(modules[f], modules) if i != "__future__"}]
    assert not heavy, f"keep these __init__ modules import-free: {heavy}"


def test_cli_help_does_not_load_torch() -> None:
    code = ("import sys, specguard.cli; specguard.cli.build_parser(); "
            "print(sorted(m for m in ('torch', 'transformers') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         cwd=ROOT)
    assert out.stdout.strip() == "[]"


def test_config_import_does_not_load_torch() -> None:
    code = ("import sys, specguard_core.config as c; c.parse_sets(['k=2']); c.preset('fast'); "
            "print(sorted(m for m in ('torch', 'transformers') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         cwd=ROOT)
    assert out.stdout.strip() == "[]"


def test_folders_stay_small() -> None:
    sizes = {d: len(list(d.glob("*.py")))
             for pkg in ("specguard_core", "specguard_bench", "specguard")
             for d in [ROOT / pkg, *(ROOT / pkg).rglob("*")]
             if d.is_dir() and (d / "__init__.py").exists()}
    assert len(sizes) >= 14
    big = {str(d.relative_to(ROOT)): n for d, n in sizes.items() if n > 13}
    assert not big, f"split these folders by concern: {big}"


def test_no_old_module_path_is_kept() -> None:
    """Modules live at one path: nothing re-exports a moved module under an old name."""
    import importlib

    for old in ("specguard_core.engine.handle", "specguard_core.engine.sampling",
                "specguard_core.engine.steps", "specguard_integrations.llama_index_trace"):
        with pytest.raises(ModuleNotFoundError):
            importlib.import_module(old)
