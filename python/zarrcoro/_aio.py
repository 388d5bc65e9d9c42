"""Completing asyncio futures from the engine: the native module calls
``loop.call_soon_threadsafe(complete, future, exception, result)`` once per
operation, so the loop's thread only sets a result."""


def complete(future, exception, result=None):
    if future.done():  # cancelled by its task meanwhile
        return
    if exception is None:
        future.set_result(result)
    else:
        future.set_exception(exception)
