"""lbweb's nftables compiler (pure) and the one module that talks to the kernel (applier)."""
