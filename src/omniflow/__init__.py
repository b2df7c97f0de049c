"""omniflow: full-duplex, multimodal conversation for ROS 2 robots on edge hardware."""

try:
    from omniflow._version import __version__
except ImportError:  # a source tree that was never built: the version lives in package.xml
    __version__ = "0+unknown"

__all__ = ["__version__"]
