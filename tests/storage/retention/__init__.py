"""The retention sweep over every store it reaches: conversations, files, feedback, audit."""
