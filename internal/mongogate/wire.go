package mongogate

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"strings"
)

// Wire protocol constants: only what the gate needs to route a message.
// See https://www.mongodb.com/docs/manual/reference/mongodb-wire-protocol/.
const (
	headerLen = 16

	opMsg = 2013

	flagChecksumPresent = 1 << 0
	flagMoreToCome      = 1 << 1

	// maxMessageLen bounds a message so a corrupt length cannot make the gate
	// allocate gigabytes. MongoDB's own limit is 48 MB (maxMessageSizeBytes).
	maxMessageLen = 48 * 1000 * 1000
)

// writeCommands are the commands FerretDB v1 executes as a read followed by a
// separate write, which is what breaks single-document atomicity.
var writeCommands = []string{"insert", "update", "delete", "findAndModify"}

// message is one raw wire-protocol message: header and body exactly as
// received, so it can be forwarded byte for byte.
type message struct {
	raw []byte
}

func (m message) requestID() int32  { return int32(binary.LittleEndian.Uint32(m.raw[4:])) }
func (m message) responseTo() int32 { return int32(binary.LittleEndian.Uint32(m.raw[8:])) }
func (m message) opCode() int32     { return int32(binary.LittleEndian.Uint32(m.raw[12:])) }

// readMessage reads one whole message. It returns io.EOF only when the peer
// closed the connection cleanly between messages.
func readMessage(r io.Reader) (message, error) {
	var hdr [4]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		return message{}, err
	}

	n := int32(binary.LittleEndian.Uint32(hdr[:]))
	if n < headerLen || n > maxMessageLen {
		return message{}, fmt.Errorf("invalid message length %d", n)
	}

	raw := make([]byte, n)
	copy(raw, hdr[:])

	if _, err := io.ReadFull(r, raw[4:]); err != nil {
		if errors.Is(err, io.EOF) {
			err = io.ErrUnexpectedEOF
		}
		return message{}, fmt.Errorf("read message body: %w", err)
	}

	return message{raw: raw}, nil
}

// opMsgInfo is what the gate learns from an OP_MSG request.
type opMsgInfo struct {
	moreToCome bool   // the client expects no reply
	command    string // first key of the body (kind 0) section; "" if unparsable
}

// isWrite reports whether the request is a write command that must run under
// the gate's mutex.
func (i opMsgInfo) isWrite() bool {
	for _, c := range writeCommands {
		if strings.EqualFold(i.command, c) {
			return true
		}
	}
	return false
}

// parseOpMsg reads the flag bits and the command name of an OP_MSG. It never
// fails: a message it cannot parse yields an empty command name, and FerretDB
// will reject such a message anyway.
func parseOpMsg(m message) opMsgInfo {
	b := m.raw[headerLen:]
	if len(b) < 4 {
		return opMsgInfo{}
	}

	flags := binary.LittleEndian.Uint32(b)
	info := opMsgInfo{moreToCome: flags&flagMoreToCome != 0}

	b = b[4:]
	if flags&flagChecksumPresent != 0 && len(b) >= 4 {
		b = b[:len(b)-4]
	}

	// The body section is usually first, but the protocol allows document
	// sequences (kind 1) before it, so skip those rather than give up.
	for len(b) > 0 {
		kind := b[0]
		b = b[1:]

		if len(b) < 4 {
			return info
		}
		size := int(binary.LittleEndian.Uint32(b))
		if size < 5 || size > len(b) {
			return info
		}

		switch kind {
		case 0:
			info.command = firstKey(b[:size])
			return info
		case 1:
			b = b[size:]
		default:
			return info
		}
	}

	return info
}

// firstKey returns the name of the first element of a BSON document, or "".
func firstKey(doc []byte) string {
	// int32 length, then elements: type byte, NUL-terminated name, value.
	if len(doc) < 6 || doc[4] == 0 {
		return ""
	}

	name := doc[5:]
	end := bytes.IndexByte(name, 0)
	if end < 0 {
		return ""
	}

	return string(name[:end])
}
