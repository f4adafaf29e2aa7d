"""A target served by vLLM: the `Target` over its OpenAI-compatible API (`target`), the served model
it extends (`served`: its name, its tokenizer checked against the server's), its HTTP client
(`http`) and loading a pair with a served target (`load`)."""
