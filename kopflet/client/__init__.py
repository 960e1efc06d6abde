"""The apiserver client and the event recorder (client-go rest and tools/record)."""
