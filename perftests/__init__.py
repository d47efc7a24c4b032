"""perftests: a decode-throughput regression gate for LLM services with speculative decoding."""

__version__ = "0.1.0"
