"""Which kind of WhatsApp media a file is sent as, and the sizes the Cloud API takes of each.

Per the Cloud API's supported media types
(https://developers.facebook.com/docs/whatsapp/cloud-api/reference/media#supported-media-types):
image (JPEG, PNG; 5 MB), audio (AAC, AMR, MP3, M4A, OGG with Opus; 16 MB), video (MP4, 3GPP; 16 MB) and
document (any other type; 100 MB). A file of an image, audio or video type but larger than that type takes is
sent as a document, so the channel's limit is a document's. WebP is a sticker there (not a photo with a caption):
it goes as a document too.
"""

from __future__ import annotations

import mimetypes

from gateway import OutgoingPayload, Part

MIB = 1 << 20
FILE_LIMIT = 100 * MIB
"""The largest file sent at all (a document); the chat tool refuses a larger one before sending."""
KINDS: dict[str, tuple[frozenset[str], int]] = {
    "image": (frozenset({"image/jpeg", "image/png"}), 5 * MIB),
    "audio": (frozenset({"audio/aac", "audio/amr", "audio/mpeg", "audio/mp4", "audio/x-m4a", "audio/ogg"}), 16 * MIB),
    "video": (frozenset({"video/mp4", "video/3gpp"}), 16 * MIB),
}
"""Media kinds other than document: the MIME types each takes and its size limit."""
CAPTION_LIMIT = 1024  # characters of an image's, video's or document's caption


def mime_of(filename: str) -> str:
    """The MIME type a file is uploaded with, by its name (application/octet-stream when unknown)."""
    return mimetypes.guess_type(filename)[0] or "application/octet-stream"


def media_kind(filename: str, size: int) -> str:
    """The message type a file goes as: image, audio, video, or document (any other type, or too large)."""
    mime = mime_of(filename)
    for kind, (types, limit) in KINDS.items():
        if mime in types and size <= limit:
            return kind
    return "document"


def captioned(outgoing: OutgoingPayload, parts: list[Part]) -> list[Part]:
    """One file with a short text and no buttons (a chat tool's `send_file` with its caption) is one message, the
    text the file's caption, unless the file is audio (an audio message takes no caption). The part keeps the
    file's index, so a delivery journaled before (its text sent, its file not) sends the file, never skips it."""
    texts = [part for part in parts if part.file is None]
    files = [part for part in parts if part.file is not None]
    if (outgoing.stream_key is not None or len(files) != 1 or len(texts) != 1 or texts[0].buttons
            or len(texts[0].text or "") > CAPTION_LIMIT or files[0].file is None
            or mime_of(files[0].file.name) in KINDS["audio"][0]):
        return parts
    return [Part(files[0].index, text=texts[0].text, file=files[0].file)]
