package jsonrow

import (
	"encoding/json"
	"math"
	"testing"
)

func TestRoundTripKeepsOrder(t *testing.T) {
	r := New([]string{"z", "a", "m"}, []any{int64(1), "x", nil})
	b, err := json.Marshal(r)
	if err != nil || string(b) != `{"z":1,"a":"x","m":null}` {
		t.Fatalf("%s %v", b, err)
	}
	var back Row
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	if v, ok := back.Get("a"); !ok || v != "x" || len(back.Values()) != 3 {
		t.Fatalf("%+v", back)
	}
	if _, ok := back.Get("nope"); ok {
		t.Fatal("a missing column was found")
	}
	// NaN cannot be JSON: it is written as text rather than failing.
	b, _ = json.Marshal(New([]string{"f"}, []any{math.NaN()}))
	if string(b) != `{"f":"NaN"}` {
		t.Fatalf("%s", b)
	}
	if err := json.Unmarshal([]byte(`[1]`), &back); err == nil {
		t.Fatal("an array is not a row")
	}
}

func TestCells(t *testing.T) {
	if Int(int64(7)) != 7 || Int(7.9) != 7 || Int("7") != 0 || Int(nil) != 0 {
		t.Error("Int")
	}
	if Float(int64(2)) != 2 || Float(2.5) != 2.5 || Float([]byte("2")) != 0 {
		t.Error("Float")
	}
	if String("a") != "a" || String([]byte("b")) != "b" || String(int64(1)) != "" || String(nil) != "" {
		t.Error("String")
	}
}
