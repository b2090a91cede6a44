"""The root's detectors (DESIGN §6): straggler, loss spike, non-finite, hang, MFU drop, data-loader stall,
hardware. Each turns finalised windows into events (`events.Event`) kept by an `events.EventLog`."""

from collectors.detectors.base import Context, Detector
from collectors.detectors.events import KINDS, Event, EventLog
from collectors.detectors.sinks import GrafanaAnnotationSink, SinkConfig, WebhookSink
from collectors.detectors.suite import Detectors, DetectorsConfig

__all__ = ["KINDS", "Context", "Detector", "Detectors", "DetectorsConfig", "Event", "EventLog",
           "GrafanaAnnotationSink", "SinkConfig", "WebhookSink"]
