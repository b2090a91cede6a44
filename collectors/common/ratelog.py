"""`RateLimitedLog` lives in telemetry/ratelog.py (the SDK uses it too, and never imports the services); the
services' modules import it from here as before."""

from telemetry.ratelog import DEFAULT_EVERY_S as DEFAULT_EVERY_S
from telemetry.ratelog import RateLimitedLog as RateLimitedLog
