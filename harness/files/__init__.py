"""Writing files safely: inside a run directory, which is untrusted data (`inside`: no link
followed, atomic replacement, appends), and where the user named a path (`user_files`). Every
module that writes goes through one of these two (docs/concepts/hardening.md)."""
