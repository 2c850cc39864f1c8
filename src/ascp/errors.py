"""The one exception type a user can cause: its message is a single sentence for stderr."""


class AscpError(Exception):
    """Bad input or configuration: what is wrong, where, and how to fix it, in one sentence.

    The command line prints the message alone (no traceback) and exits with code 2.
    """
