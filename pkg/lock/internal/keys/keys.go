// Package keys holds the key-naming rules the lock backends share.
package keys

import "strings"

// Prefix returns the prefix of a namespace's keys under a backend's
// default prefix base: base, namespace and a slash, or base alone for the
// empty namespace. Every backend names its keys this way, so that lock
// services sharing a store (the stock service's replicas of different
// databases, say) never wait for each other.
func Prefix(base, namespace string) string {
	if namespace == "" {
		return base
	}
	return base + namespace + "/"
}

// GlobEscape escapes the characters Redis's KEYS and SCAN patterns treat
// specially, so that s matches only itself.
func GlobEscape(s string) string {
	if !strings.ContainsAny(s, `*?[]\`) {
		return s
	}
	var b strings.Builder
	for _, r := range s {
		if strings.ContainsRune(`*?[]\`, r) {
			b.WriteByte('\\')
		}
		b.WriteRune(r)
	}
	return b.String()
}
