"""Completing asyncio futures from the engine: the native module calls
``loop.call_soon_threadsafe(complete, future, exception)`` once per
operation, so the loop's thread only sets a result."""


def complete(future, exception):
    if future.done():  # cancelled by its task meanwhile
        return
    if exception is None:
        future.set_result(None)
    else:
        future.set_exception(exception)
