package throttler_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"time"

	"github.com/go-throttler/throttler"
)

// A caller that knows what its call may cost puts it on the request's
// context, and a Transport whose Cost has no Estimate reserves it: here an
// LLM call's prompt tokens (counted by the caller's tokenizer) plus its
// max_tokens, the most the call may use. Once the body has been read, the
// call settles at what the response says it used, for an API that counts
// a call so once it ends (OpenAI documents no such adjustment: see
// ExampleTransport_openAI); a refusal settles at 0.
func ExampleContextWithCost() {
	rdb, stop := embeddedRedis()
	defer stop()
	api := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, `{"choices":[{"message":{"content":"..."}}],"usage":{"total_tokens":740}}`)
	}))
	defer api.Close()
	defer api.Client().CloseIdleConnections()

	tokens, err := throttler.New(rdb, "llm-tokens", 30000, time.Minute)
	if err != nil {
		panic(err)
	}
	client := &http.Client{Transport: &throttler.Transport{
		Base:  api.Client().Transport,
		Route: tokens.Route(),
		Cost:  &throttler.Cost{Actual: usageTokens}, // no Estimate: the context's cost
	}}

	const promptTokens, maxTokens = 40, 1000
	ctx := throttler.ContextWithCost(context.Background(), promptTokens+maxTokens)
	body := `{"model":"gpt-4o-mini","max_tokens":1000,"messages":[{"role":"user","content":"Summarize this ticket."}]}`
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, api.URL, strings.NewReader(body))
	resp, err := client.Do(req)
	if err != nil {
		panic(err)
	}
	io.Copy(io.Discard, resp.Body) // read to the end: the call is settled
	resp.Body.Close()

	u, _ := tokens.Usage(context.Background())
	fmt.Println("reserved:", tokens.Stats().Admitted, "tokens; counted after the call:", u[0].Used)
	// Output:
	// reserved: 1040 tokens; counted after the call: 740
}
