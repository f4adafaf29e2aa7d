"""Many callers on one engine: turns step by step (`turns`), batched rounds of padded forwards
(`batcher`: admission and the baton; `leader`: when a round runs and which calls it takes;
`rounds`, `padded`: what it runs), and the CPU-only runner thread that keeps torch's OpenMP teams
to one thread (`cpu_runner`)."""
