"""The two event types of core/v1 (v1.EventTypeNormal, v1.EventTypeWarning)."""

NORMAL = "Normal"
WARNING = "Warning"
