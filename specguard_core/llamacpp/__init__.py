"""The llama.cpp backend: GGUF models run in-process by llama.cpp (`llama-cpp-python`)."""
