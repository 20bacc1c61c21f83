from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class CommandStatementIngest(_message.Message):
    __slots__ = ("table_definition_options", "table", "schema", "catalog", "temporary", "transaction_id", "options")
    class TableDefinitionOptions(_message.Message):
        __slots__ = ("if_not_exist", "if_exists")
        class TableNotExistOption(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
            __slots__ = ()
            TABLE_NOT_EXIST_OPTION_UNSPECIFIED: _ClassVar[CommandStatementIngest.TableDefinitionOptions.TableNotExistOption]
            TABLE_NOT_EXIST_OPTION_CREATE: _ClassVar[CommandStatementIngest.TableDefinitionOptions.TableNotExistOption]
            TABLE_NOT_EXIST_OPTION_FAIL: _ClassVar[CommandStatementIngest.TableDefinitionOptions.TableNotExistOption]
        TABLE_NOT_EXIST_OPTION_UNSPECIFIED: CommandStatementIngest.TableDefinitionOptions.TableNotExistOption
        TABLE_NOT_EXIST_OPTION_CREATE: CommandStatementIngest.TableDefinitionOptions.TableNotExistOption
        TABLE_NOT_EXIST_OPTION_FAIL: CommandStatementIngest.TableDefinitionOptions.TableNotExistOption
        class TableExistsOption(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
            __slots__ = ()
            TABLE_EXISTS_OPTION_UNSPECIFIED: _ClassVar[CommandStatementIngest.TableDefinitionOptions.TableExistsOption]
            TABLE_EXISTS_OPTION_FAIL: _ClassVar[CommandStatementIngest.TableDefinitionOptions.TableExistsOption]
            TABLE_EXISTS_OPTION_APPEND: _ClassVar[CommandStatementIngest.TableDefinitionOptions.TableExistsOption]
            TABLE_EXISTS_OPTION_REPLACE: _ClassVar[CommandStatementIngest.TableDefinitionOptions.TableExistsOption]
        TABLE_EXISTS_OPTION_UNSPECIFIED: CommandStatementIngest.TableDefinitionOptions.TableExistsOption
        TABLE_EXISTS_OPTION_FAIL: CommandStatementIngest.TableDefinitionOptions.TableExistsOption
        TABLE_EXISTS_OPTION_APPEND: CommandStatementIngest.TableDefinitionOptions.TableExistsOption
        TABLE_EXISTS_OPTION_REPLACE: CommandStatementIngest.TableDefinitionOptions.TableExistsOption
        IF_NOT_EXIST_FIELD_NUMBER: _ClassVar[int]
        IF_EXISTS_FIELD_NUMBER: _ClassVar[int]
        if_not_exist: CommandStatementIngest.TableDefinitionOptions.TableNotExistOption
        if_exists: CommandStatementIngest.TableDefinitionOptions.TableExistsOption
        def __init__(self, if_not_exist: _Optional[_Union[CommandStatementIngest.TableDefinitionOptions.TableNotExistOption, str]] = ..., if_exists: _Optional[_Union[CommandStatementIngest.TableDefinitionOptions.TableExistsOption, str]] = ...) -> None: ...
    class OptionsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    TABLE_DEFINITION_OPTIONS_FIELD_NUMBER: _ClassVar[int]
    TABLE_FIELD_NUMBER: _ClassVar[int]
    SCHEMA_FIELD_NUMBER: _ClassVar[int]
    CATALOG_FIELD_NUMBER: _ClassVar[int]
    TEMPORARY_FIELD_NUMBER: _ClassVar[int]
    TRANSACTION_ID_FIELD_NUMBER: _ClassVar[int]
    OPTIONS_FIELD_NUMBER: _ClassVar[int]
    table_definition_options: CommandStatementIngest.TableDefinitionOptions
    table: str
    schema: str
    catalog: str
    temporary: bool
    transaction_id: bytes
    options: _containers.ScalarMap[str, str]
    def __init__(self, table_definition_options: _Optional[_Union[CommandStatementIngest.TableDefinitionOptions, _Mapping]] = ..., table: _Optional[str] = ..., schema: _Optional[str] = ..., catalog: _Optional[str] = ..., temporary: _Optional[bool] = ..., transaction_id: _Optional[bytes] = ..., options: _Optional[_Mapping[str, str]] = ...) -> None: ...

class ActionBeginTransactionResult(_message.Message):
    __slots__ = ("transaction_id",)
    TRANSACTION_ID_FIELD_NUMBER: _ClassVar[int]
    transaction_id: bytes
    def __init__(self, transaction_id: _Optional[bytes] = ...) -> None: ...

class ActionBeginSavepointRequest(_message.Message):
    __slots__ = ("transaction_id", "name")
    TRANSACTION_ID_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    transaction_id: bytes
    name: str
    def __init__(self, transaction_id: _Optional[bytes] = ..., name: _Optional[str] = ...) -> None: ...

class ActionBeginSavepointResult(_message.Message):
    __slots__ = ("savepoint_id",)
    SAVEPOINT_ID_FIELD_NUMBER: _ClassVar[int]
    savepoint_id: bytes
    def __init__(self, savepoint_id: _Optional[bytes] = ...) -> None: ...

class ActionEndSavepointRequest(_message.Message):
    __slots__ = ("savepoint_id", "action")
    class EndSavepoint(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
        __slots__ = ()
        END_SAVEPOINT_UNSPECIFIED: _ClassVar[ActionEndSavepointRequest.EndSavepoint]
        END_SAVEPOINT_RELEASE: _ClassVar[ActionEndSavepointRequest.EndSavepoint]
        END_SAVEPOINT_ROLLBACK: _ClassVar[ActionEndSavepointRequest.EndSavepoint]
    END_SAVEPOINT_UNSPECIFIED: ActionEndSavepointRequest.EndSavepoint
    END_SAVEPOINT_RELEASE: ActionEndSavepointRequest.EndSavepoint
    END_SAVEPOINT_ROLLBACK: ActionEndSavepointRequest.EndSavepoint
    SAVEPOINT_ID_FIELD_NUMBER: _ClassVar[int]
    ACTION_FIELD_NUMBER: _ClassVar[int]
    savepoint_id: bytes
    action: ActionEndSavepointRequest.EndSavepoint
    def __init__(self, savepoint_id: _Optional[bytes] = ..., action: _Optional[_Union[ActionEndSavepointRequest.EndSavepoint, str]] = ...) -> None: ...
