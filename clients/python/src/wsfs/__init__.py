"""wsfs: the Python client of the wsfs workspace filesystem.

    import wsfs

    with wsfs.Client("127.0.0.1:50051") as client:
        with client.create_session() as session:     # deleted at the end
            session.write("notes/todo.md", "- ship it\\n")
            print(session.read_text("notes/todo.md"))

:class:`Client` and :class:`Session` are synchronous; ``wsfs.aio`` has the
same API for asyncio (:class:`AsyncClient`). Every failure raises a
:class:`WsfsError` subclass named after the contract reason.
"""

from .aio import AsyncByteStream, AsyncClient, AsyncGrepStream, AsyncSession, AsyncWatch
from .client import ByteStream, Client, GrepStream, Session, Watch
from .errors import *  # noqa: F403
from .errors import __all__ as _errors_all
from .types import *  # noqa: F403
from .types import __all__ as _types_all

__version__ = "0.1.0"

__all__ = [
    "Client",
    "Session",
    "ByteStream",
    "GrepStream",
    "Watch",
    "AsyncClient",
    "AsyncSession",
    "AsyncByteStream",
    "AsyncGrepStream",
    "AsyncWatch",
    *_errors_all,
    *_types_all,
]
