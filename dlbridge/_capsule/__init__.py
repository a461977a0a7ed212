"""DLPack capsules: reading, probing, editing, the exchange API and carriers."""
