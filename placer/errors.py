"""The one exception type for errors a user can cause and fix."""


class PlacerError(Exception):
    """A problem with the user's input; the message says what to do about it.

    The CLI prints it as one line and exits non-zero, without a traceback.
    """
