"""Front ends: what turns a user's loop into a ``LoopBody`` (built-in and file programs, the op
constructors they call, and graphs imported from Triton)."""
