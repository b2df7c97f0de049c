"""The one exceptions module of omniflow.

Library errors (OpenCV, PortAudio, libsndfile, rclpy) are translated at the
boundary into these types and re-raised ``from err``, so callers handle one
family of exceptions and every message says what was wrong and what to do.
"""


class OmniflowError(Exception):
    """Base class of every error omniflow raises on purpose."""


class ConfigError(OmniflowError, ValueError):
    """A parameter or configuration value is invalid."""


class SourceError(OmniflowError):
    """A capture source (device or file) could not be opened or read."""


class SourceExhausted(SourceError):
    """A file source reached its end and is not set to loop."""


class ImageFormatError(OmniflowError, ValueError):
    """An image buffer is inconsistent with its declared size or encoding."""


class AudioFormatError(OmniflowError, ValueError):
    """An audio buffer is inconsistent with its declared format."""


class EngineError(OmniflowError):
    """A speech, recognition, vision or language engine is missing or failed."""


class SinkError(OmniflowError):
    """An audio output (device or file) could not be opened or written."""


class DeviceNotFoundError(SourceError, SinkError):
    """The requested input or output device does not exist; the message lists those that do."""


class RemoteCallError(OmniflowError):
    """A call to another node (a parameter or lifecycle service) timed out, was not
    available, or was refused; the message names the node, the call and the reason."""


class BagError(OmniflowError):
    """A recorded bag is missing, unreadable, truncated, or lacks the topics or types asked for."""


class BagFullError(BagError):
    """Recording stopped because the disk (or a file-size limit) left no room: the bag has been
    closed with what was written before, and the message says why, where and how much."""
