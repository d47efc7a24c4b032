"""Error types. The split matters: a broken *run* (service died, bad config) must never be
reported as a performance *regression*, so each failure mode has its own class."""

from __future__ import annotations


class PerftestsError(Exception):
    """Base class for every error this package raises on purpose."""


class ConfigError(PerftestsError):
    """A profile, option or file is malformed. The message names the file, line and field."""


class UnknownProfileError(ConfigError):
    """`--hw NAME` names no profile."""


class ServiceError(PerftestsError):
    """The service under test failed: did not start, died, or is unreachable.

    This is an error of the run, never a measurement."""


class ServiceStartError(ServiceError):
    """The service exited or timed out while starting; carries the log tail."""


class EngineError(ServiceError):
    """The engine answered, but not with what its documented API promises."""


class AuthError(ServiceError):
    """The service refused the API key (or its absence) on an endpoint it guards. Carries the
    status and path only: the key itself never goes into a message."""

    def __init__(self, path: str, status: int) -> None:
        super().__init__(f"{path} answered {status}")
        self.path, self.status = path, status


class NotSupportedError(PerftestsError):
    """The engine has no such capability (e.g. an OpenAI-compatible server cannot flush its cache)."""


class BuildError(PerftestsError):
    """Building the reference llama-server failed."""
