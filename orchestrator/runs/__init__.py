"""What a run is and what is done with runs above storage: its state model, job states, the run store's shared logic,
listing, `/status` text, retention."""
