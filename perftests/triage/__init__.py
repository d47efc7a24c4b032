"""Triage without a run, the way the source document reasons: curves measured elsewhere
(`imported.py`), another hardware's curve carried over with the uncertainty of doing so
(`extrapolate.py`), a reported figure explained step by step (`explain.py`), and two hardwares'
baselines side by side, per context and per cost term (`crosshw.py`)."""
