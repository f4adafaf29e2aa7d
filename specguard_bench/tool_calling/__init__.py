"""The tool-calling suites (`specguard bench --suite bfcl|agents`): every method behind one chat
interface (`chat_engine.MethodEngine`), the suites' shared resumable runner (`suites`) and their
names and defaults (`names`, light enough for `--help`); BFCL single-turn tasks (`bfcl_data`),
BFCL's AST checks (`bfcl_check`) and the BFCL run (`bfcl_bench`); the GSM8K calculator agent in
LangChain and LlamaIndex (`agents_bench`) and its run and reports (`agents_report`).

Built on `specguard_bench.common` and `specguard_bench.reasoning` (the agents grade GSM8K answers);
this `__init__` imports nothing.
"""
