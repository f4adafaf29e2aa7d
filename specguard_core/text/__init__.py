"""Text handling, torch-free: where a step ends and what kind it is (`steps`), chat templates, tool
calls and untrusted JSON (`chat`, `schema`), and response formats (`formats`)."""
