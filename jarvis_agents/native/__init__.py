"""Native tool calling: the tools offered as functions, the model's tool calls read."""
