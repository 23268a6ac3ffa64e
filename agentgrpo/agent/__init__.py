"""Conversation format (chat rendering, tool-call parsing) and trajectory types."""
