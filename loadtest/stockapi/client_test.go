package stockapi

import "testing"

func TestSkuOfURL(t *testing.T) {
	if got := SKUOfURL("http://h:1/v1/items/abc-1/decrement"); got != "abc-1" {
		t.Fatal(got)
	}
}

func TestSKUOfURLUnescapes(t *testing.T) {
	if got := SKUOfURL("http://h:1/v1/items/a%2Fb/decrement"); got != "a/b" {
		t.Fatal(got)
	}
}
