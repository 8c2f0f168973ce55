package inventory

// MaxKeyLen is the longest idempotency key accepted, in bytes.
const MaxKeyLen = 128

// ValidKey reports whether key is an acceptable idempotency key: 1 to 128
// printable ASCII characters (space to tilde).
func ValidKey(key string) bool {
	if len(key) == 0 || len(key) > MaxKeyLen {
		return false
	}
	for i := 0; i < len(key); i++ {
		if key[i] < 0x20 || key[i] > 0x7e {
			return false
		}
	}
	return true
}
