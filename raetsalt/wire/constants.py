"""Numbers of the RAET wire format.

Spec constants are fixed by raet 0.6.8 (changing one breaks interop); tunables are
local safety limits that a peer never sees.  Each value says where it comes from.
"""

from __future__ import annotations

# --- spec constants (docs/raet-wire.md §2-§5) ------------------------------------

#: Largest datagram raet sends or accepts: 1024 bytes, chosen so a packet fits the
#: IPv6 minimum MTU (1280) with room for IP/UDP headers (raeting.UDP_MAX_PACKET_SIZE).
MAX_PACKET_SIZE = 1024

#: A head is at most 255 bytes because ``hl`` is written as exactly two hex digits.
MAX_HEAD_SIZE = 255

#: Terminator of a text head (head kind 0) and of a JSON head (head kind 1).
HEAD_END = b"\n\n"
JSON_HEAD_END = b"\r\n\r\n"

#: Every text head starts with this line; every JSON head with this prefix (§3.1, §3.2).
RAET_HEAD_PREFIX = b"ri RAET\n"
JSON_HEAD_PREFIX = b'{"ri":"RAET",'

#: Protocol version ``vn``; raet only knows version 0.
VERSION = 0

#: Ed25519 detached signature (foot kind nacl).
SIGNATURE_SIZE = 64

#: crypto_box sizes: keys, the Poly1305 tag that precedes the cipher text (libsodium
#: "easy" layout), and the random nonce raet appends to the cipher text (TailSize.nacl).
KEY_SIZE = 32
SEED_SIZE = 32
TAG_SIZE = 16
NONCE_SIZE = 24

#: Extra head bytes a segment head may need over the unsegmented one, used by raet to
#: size segments (road/packeting.py Tray.packetize): 27 for text heads, 36 for JSON.
SEGMENT_HEAD_EXTRA_RAET = 27
SEGMENT_HEAD_EXTRA_JSON = 36

#: Largest coat stream of one message: 1024 x 65535 bytes (raeting.MAX_MESSAGE_SIZE).
MAX_MESSAGE_SIZE = 67_107_840

#: Ids (se, de, si, ti) are 32-bit unsigned; so are the other numeric head fields here.
MAX_UINT32 = 0xFFFF_FFFF

# --- tunables (local limits, invisible on the wire) ------------------------------

#: Largest body ``decode_body_untrusted`` will look at.  A message body can be as long
#: as the whole coat stream of a message, so this is the spec's message size.
MAX_BODY_SIZE = MAX_MESSAGE_SIZE

#: Deepest nesting of lists/maps accepted in a decoded body.  Salt payloads stay well
#: below this; the limit keeps later recursive consumers (msgpack re-encoding, repr,
#: YAML output) far away from Python's recursion limit.
MAX_BODY_DEPTH = 100
