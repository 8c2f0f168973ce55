package keys

import "testing"

func TestPrefix(t *testing.T) {
	if got := Prefix("base:", ""); got != "base:" {
		t.Errorf(`Prefix("base:", "") = %q`, got)
	}
	if got := Prefix("base:", "db"); got != "base:db/" {
		t.Errorf(`Prefix("base:", "db") = %q`, got)
	}
}

func TestGlobEscape(t *testing.T) {
	for in, want := range map[string]string{"item/sku-1": "item/sku-1", `a*b?[c]\`: `a\*b\?\[c\]\\`} {
		if got := GlobEscape(in); got != want {
			t.Errorf("GlobEscape(%q) = %q, want %q", in, got, want)
		}
	}
}
