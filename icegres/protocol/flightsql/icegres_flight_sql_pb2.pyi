from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class CommandGetSqlInfo(_message.Message):
    __slots__ = ("info",)
    INFO_FIELD_NUMBER: _ClassVar[int]
    info: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, info: _Optional[_Iterable[int]] = ...) -> None: ...

class CommandGetCatalogs(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class CommandGetDbSchemas(_message.Message):
    __slots__ = ("catalog", "db_schema_filter_pattern")
    CATALOG_FIELD_NUMBER: _ClassVar[int]
    DB_SCHEMA_FILTER_PATTERN_FIELD_NUMBER: _ClassVar[int]
    catalog: str
    db_schema_filter_pattern: str
    def __init__(self, catalog: _Optional[str] = ..., db_schema_filter_pattern: _Optional[str] = ...) -> None: ...

class CommandGetTables(_message.Message):
    __slots__ = ("catalog", "db_schema_filter_pattern", "table_name_filter_pattern", "table_types", "include_schema")
    CATALOG_FIELD_NUMBER: _ClassVar[int]
    DB_SCHEMA_FILTER_PATTERN_FIELD_NUMBER: _ClassVar[int]
    TABLE_NAME_FILTER_PATTERN_FIELD_NUMBER: _ClassVar[int]
    TABLE_TYPES_FIELD_NUMBER: _ClassVar[int]
    INCLUDE_SCHEMA_FIELD_NUMBER: _ClassVar[int]
    catalog: str
    db_schema_filter_pattern: str
    table_name_filter_pattern: str
    table_types: _containers.RepeatedScalarFieldContainer[str]
    include_schema: bool
    def __init__(self, catalog: _Optional[str] = ..., db_schema_filter_pattern: _Optional[str] = ..., table_name_filter_pattern: _Optional[str] = ..., table_types: _Optional[_Iterable[str]] = ..., include_schema: _Optional[bool] = ...) -> None: ...

class CommandGetTableTypes(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class CommandStatementQuery(_message.Message):
    __slots__ = ("query", "transaction_id")
    QUERY_FIELD_NUMBER: _ClassVar[int]
    TRANSACTION_ID_FIELD_NUMBER: _ClassVar[int]
    query: str
    transaction_id: bytes
    def __init__(self, query: _Optional[str] = ..., transaction_id: _Optional[bytes] = ...) -> None: ...

class TicketStatementQuery(_message.Message):
    __slots__ = ("statement_handle",)
    STATEMENT_HANDLE_FIELD_NUMBER: _ClassVar[int]
    statement_handle: bytes
    def __init__(self, statement_handle: _Optional[bytes] = ...) -> None: ...

class CommandPreparedStatementQuery(_message.Message):
    __slots__ = ("prepared_statement_handle",)
    PREPARED_STATEMENT_HANDLE_FIELD_NUMBER: _ClassVar[int]
    prepared_statement_handle: bytes
    def __init__(self, prepared_statement_handle: _Optional[bytes] = ...) -> None: ...

class DoPutPreparedStatementResult(_message.Message):
    __slots__ = ("prepared_statement_handle",)
    PREPARED_STATEMENT_HANDLE_FIELD_NUMBER: _ClassVar[int]
    prepared_statement_handle: bytes
    def __init__(self, prepared_statement_handle: _Optional[bytes] = ...) -> None: ...

class CommandStatementUpdate(_message.Message):
    __slots__ = ("query", "transaction_id")
    QUERY_FIELD_NUMBER: _ClassVar[int]
    TRANSACTION_ID_FIELD_NUMBER: _ClassVar[int]
    query: str
    transaction_id: bytes
    def __init__(self, query: _Optional[str] = ..., transaction_id: _Optional[bytes] = ...) -> None: ...

class CommandPreparedStatementUpdate(_message.Message):
    __slots__ = ("prepared_statement_handle",)
    PREPARED_STATEMENT_HANDLE_FIELD_NUMBER: _ClassVar[int]
    prepared_statement_handle: bytes
    def __init__(self, prepared_statement_handle: _Optional[bytes] = ...) -> None: ...

class DoPutUpdateResult(_message.Message):
    __slots__ = ("record_count",)
    RECORD_COUNT_FIELD_NUMBER: _ClassVar[int]
    record_count: int
    def __init__(self, record_count: _Optional[int] = ...) -> None: ...

class ActionCreatePreparedStatementRequest(_message.Message):
    __slots__ = ("query", "transaction_id")
    QUERY_FIELD_NUMBER: _ClassVar[int]
    TRANSACTION_ID_FIELD_NUMBER: _ClassVar[int]
    query: str
    transaction_id: bytes
    def __init__(self, query: _Optional[str] = ..., transaction_id: _Optional[bytes] = ...) -> None: ...

class ActionCreatePreparedStatementResult(_message.Message):
    __slots__ = ("prepared_statement_handle", "dataset_schema", "parameter_schema")
    PREPARED_STATEMENT_HANDLE_FIELD_NUMBER: _ClassVar[int]
    DATASET_SCHEMA_FIELD_NUMBER: _ClassVar[int]
    PARAMETER_SCHEMA_FIELD_NUMBER: _ClassVar[int]
    prepared_statement_handle: bytes
    dataset_schema: bytes
    parameter_schema: bytes
    def __init__(self, prepared_statement_handle: _Optional[bytes] = ..., dataset_schema: _Optional[bytes] = ..., parameter_schema: _Optional[bytes] = ...) -> None: ...

class ActionClosePreparedStatementRequest(_message.Message):
    __slots__ = ("prepared_statement_handle",)
    PREPARED_STATEMENT_HANDLE_FIELD_NUMBER: _ClassVar[int]
    prepared_statement_handle: bytes
    def __init__(self, prepared_statement_handle: _Optional[bytes] = ...) -> None: ...

class ActionBeginTransactionRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ActionEndTransactionRequest(_message.Message):
    __slots__ = ("transaction_id", "action")
    class EndTransaction(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
        __slots__ = ()
        END_TRANSACTION_UNSPECIFIED: _ClassVar[ActionEndTransactionRequest.EndTransaction]
        END_TRANSACTION_COMMIT: _ClassVar[ActionEndTransactionRequest.EndTransaction]
        END_TRANSACTION_ROLLBACK: _ClassVar[ActionEndTransactionRequest.EndTransaction]
    END_TRANSACTION_UNSPECIFIED: ActionEndTransactionRequest.EndTransaction
    END_TRANSACTION_COMMIT: ActionEndTransactionRequest.EndTransaction
    END_TRANSACTION_ROLLBACK: ActionEndTransactionRequest.EndTransaction
    TRANSACTION_ID_FIELD_NUMBER: _ClassVar[int]
    ACTION_FIELD_NUMBER: _ClassVar[int]
    transaction_id: bytes
    action: ActionEndTransactionRequest.EndTransaction
    def __init__(self, transaction_id: _Optional[bytes] = ..., action: _Optional[_Union[ActionEndTransactionRequest.EndTransaction, str]] = ...) -> None: ...
