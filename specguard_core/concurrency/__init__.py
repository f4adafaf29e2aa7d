"""Many callers on one engine: turns step by step (`turns`), batched rounds of padded forwards
(`batcher`, `rounds`, `padded`), and the CPU-only runner thread that keeps torch's OpenMP teams
to one thread (`cpu_runner`)."""
