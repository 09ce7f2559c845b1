"""polyquant.qkeras against QKeras."""
