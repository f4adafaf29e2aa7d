"""A target served by vLLM: the `Target` over its OpenAI-compatible API (`target`), its HTTP client
(`http`) and loading a pair with a served target (`load`)."""
