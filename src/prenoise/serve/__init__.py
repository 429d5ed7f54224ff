"""`prenoise serve`: an HTTP service running Ref2VA requests in order on one model instance.

See `prenoise.serve.app` for the API, `prenoise.serve.scheduler` for ordering, prepare-ahead
and cancellation, and `prenoise.serve.paths` for the media-root rules.
"""

from prenoise.serve.app import create_app
from prenoise.serve.connections import http_protocol
from prenoise.serve.schema import ServeLimits
from prenoise.serve.service import ServeSettings, Service

__all__ = ["ServeLimits", "ServeSettings", "Service", "create_app", "http_protocol"]
