"""GPU cost measurements and latency projections (`run.sh`, `costs.py`, `project.py`)."""
