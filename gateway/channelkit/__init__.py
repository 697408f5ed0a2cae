"""What channel plugins build with: access and pairing, attachments and voice notes, buttons, chunking, progress notes,
multi-part delivery, edits, the retry backoff, a sender's platform groups."""
