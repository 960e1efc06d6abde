import datetime

from google.protobuf import any_pb2 as _any_pb2
from google.protobuf import timestamp_pb2 as _timestamp_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class SubscribeRequest(_message.Message):
    __slots__ = ("filters",)
    FILTERS_FIELD_NUMBER: _ClassVar[int]
    filters: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, filters: _Optional[_Iterable[str]] = ...) -> None: ...

class Envelope(_message.Message):
    __slots__ = ("timestamp", "namespace", "topic", "event")
    TIMESTAMP_FIELD_NUMBER: _ClassVar[int]
    NAMESPACE_FIELD_NUMBER: _ClassVar[int]
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    EVENT_FIELD_NUMBER: _ClassVar[int]
    timestamp: _timestamp_pb2.Timestamp
    namespace: str
    topic: str
    event: _any_pb2.Any
    def __init__(self, timestamp: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., namespace: _Optional[str] = ..., topic: _Optional[str] = ..., event: _Optional[_Union[_any_pb2.Any, _Mapping]] = ...) -> None: ...

class TaskStart(_message.Message):
    __slots__ = ("container_id", "pid")
    CONTAINER_ID_FIELD_NUMBER: _ClassVar[int]
    PID_FIELD_NUMBER: _ClassVar[int]
    container_id: str
    pid: int
    def __init__(self, container_id: _Optional[str] = ..., pid: _Optional[int] = ...) -> None: ...

class TaskExit(_message.Message):
    __slots__ = ("container_id", "id", "pid", "exit_status", "exited_at")
    CONTAINER_ID_FIELD_NUMBER: _ClassVar[int]
    ID_FIELD_NUMBER: _ClassVar[int]
    PID_FIELD_NUMBER: _ClassVar[int]
    EXIT_STATUS_FIELD_NUMBER: _ClassVar[int]
    EXITED_AT_FIELD_NUMBER: _ClassVar[int]
    container_id: str
    id: str
    pid: int
    exit_status: int
    exited_at: _timestamp_pb2.Timestamp
    def __init__(self, container_id: _Optional[str] = ..., id: _Optional[str] = ..., pid: _Optional[int] = ..., exit_status: _Optional[int] = ..., exited_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...

class ContainerDelete(_message.Message):
    __slots__ = ("id",)
    ID_FIELD_NUMBER: _ClassVar[int]
    id: str
    def __init__(self, id: _Optional[str] = ...) -> None: ...
