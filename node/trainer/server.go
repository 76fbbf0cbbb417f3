package trainer

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net"
	"os"
	"path/filepath"
	"sync"
	"time"

	"dsspmesh/cudaops"
)

// Config is a trainer socket's configuration.
type Config struct {
	// Socket is the Unix socket's path (<data-dir>/trainer.sock).
	Socket string
	// ShmDir holds the shared-memory file; "" = /dev/shm when it exists,
	// else the socket's folder ([NewShm]).
	ShmDir string
	// MaxFrame bounds a trainer's message (DefaultMaxFrame when 0).
	MaxFrame int
	// HelloTimeout bounds the wait for a connection's hello and for an
	// admitted trainer's init (10 s and 2 min when 0).
	HelloTimeout, InitTimeout time.Duration
	// GoneGrace is how long External.Gradient waits for its ctx to end
	// once the trainer is gone, before returning the error: the node ends
	// the worker at once, and the worker then sees its ctx end rather
	// than a failure. 0 = 5 s; negative = no wait.
	GoneGrace time.Duration
	// Answers bounds how long a trainer may take to answer a compute or
	// an evaluate; zero fields take DefaultAnswerLimits'.
	Answers AnswerLimits
}

// Validate names the first bad value.
func (c Config) Validate() error {
	switch {
	case c.Socket == "":
		return errors.New("trainer: no socket path")
	case len(c.Socket) > 107:
		return fmt.Errorf("trainer: socket path %s is %d bytes, a Unix socket's path holds at most 107 (a shorter --data-dir)", c.Socket, len(c.Socket))
	case c.MaxFrame < 0 || c.HelloTimeout < 0 || c.InitTimeout < 0 || c.GoneGrace > time.Minute ||
		c.Answers.First < 0 || c.Answers.Min < 0 || c.Answers.Factor < 0 || math.IsNaN(c.Answers.Factor):
		return fmt.Errorf("trainer: negative limit in %+v", c)
	}
	return nil
}

func (c Config) withDefaults() Config {
	if c.MaxFrame == 0 {
		c.MaxFrame = DefaultMaxFrame
	}
	if c.HelloTimeout == 0 {
		c.HelloTimeout = 10 * time.Second
	}
	if c.InitTimeout == 0 {
		c.InitTimeout = 2 * time.Minute
	}
	if c.GoneGrace == 0 {
		c.GoneGrace = 5 * time.Second
	}
	if c.Answers.First == 0 {
		c.Answers.First = DefaultAnswerLimits.First
	}
	if c.Answers.Min == 0 {
		c.Answers.Min = DefaultAnswerLimits.Min
	}
	if c.Answers.Factor == 0 {
		c.Answers.Factor = DefaultAnswerLimits.Factor
	}
	return c
}

// Admission is the job as a welcome tells an admitted trainer.
type Admission struct {
	Layout     cudaops.Layout // the job's (the trainer's, when it fixed it)
	SendInit   bool           // the trainer's initial parameters become θ₀
	Batch      int
	LocalSteps int
	Seed       uint64
	Dataset    string
	// Update is what the trainer's updates hold (UpdateDelta,
	// UpdateGradient); Optimizer the job's; Wire its wire precision.
	Update    string
	Optimizer WireOptimizer
	Wire      string
}

// Refusal is why the node refuses a trainer: an error message's code and
// text.
type Refusal struct {
	Code, Message string
	Tensor        string // layout-mismatch: the first tensor that differs
}

func (r *Refusal) Error() string { return r.Code + ": " + r.Message }

// Deps are what the server asks of the node.
type Deps struct {
	// Node is the node's id, told in welcome.
	Node string
	// Admit checks a trainer's layout against the job (and fixes the job's
	// layout with the first trainer of a new external job); a *Refusal
	// refuses it. Called from the server goroutine, one hello at a time.
	Admit func(layout cudaops.Layout) (Admission, *Refusal)
	// Init takes θ₀ from a trainer admitted with SendInit, read from the
	// theta region (the callee copies what it keeps). An error refuses
	// the trainer with code job-mismatch.
	Init func(theta []float32) error
	// Attached hands over an admitted trainer; the node runs its worker
	// on it until [External.Done]. Called from the server goroutine.
	Attached func(e *External)
	Logger   *slog.Logger
}

// Server is a node's trainer socket.
type Server struct {
	cfg Config
	d   Deps
	ln  *net.UnixListener

	mu      sync.Mutex
	shm     *Shm      // created with the first admission (the job's P)
	current *External // the attachment, nil when none
}

// Listen creates the socket (replacing a stale file at its path, mode
// 0600). [Server.Serve] accepts on it; [Server.Close] removes it.
func Listen(cfg Config, d Deps) (*Server, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	if d.Logger == nil {
		d.Logger = slog.New(slog.DiscardHandler)
	}
	if fi, err := os.Lstat(cfg.Socket); err == nil {
		if fi.Mode()&os.ModeSocket == 0 {
			return nil, fmt.Errorf("trainer: %s exists and is not a socket", cfg.Socket)
		}
		if c, err := net.DialTimeout("unix", cfg.Socket, time.Second); err == nil {
			c.Close()
			return nil, fmt.Errorf("trainer: %s answers: another node serves it", cfg.Socket)
		}
		os.Remove(cfg.Socket) // stale: its node died
	}
	if err := os.MkdirAll(filepath.Dir(cfg.Socket), 0o700); err != nil {
		return nil, fmt.Errorf("trainer: %w", err)
	}
	// Chmodded right after: the data dir (0700, node/datadir) keeps other
	// users out of the window between.
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: cfg.Socket, Net: "unix"})
	if err != nil {
		return nil, fmt.Errorf("trainer: listen %s: %w", cfg.Socket, err)
	}
	ln.SetUnlinkOnClose(true)
	if err := os.Chmod(cfg.Socket, 0o600); err != nil {
		ln.Close()
		return nil, fmt.Errorf("trainer: %w", err)
	}
	return &Server{cfg: cfg, d: d, ln: ln}, nil
}

// Path is the socket's path.
func (s *Server) Path() string { return s.cfg.Socket }

// Serve accepts trainers until ctx ends or Close; one at a time is
// attached, a second gets "busy". It returns when ctx ends, after
// ending the attachment (stop "node leaving").
func (s *Server) Serve(ctx context.Context) {
	go func() { <-ctx.Done(); s.ln.Close() }()
	for {
		c, err := s.ln.AcceptUnix()
		if err != nil {
			if ctx.Err() == nil && !errors.Is(err, net.ErrClosed) {
				s.d.Logger.Warn("trainer socket: accept", "err", err)
			}
			return
		}
		s.handle(c)
	}
}

// handle runs one connection's handshake; a trainer admitted becomes the
// attachment and goes to Deps.Attached.
func (s *Server) handle(c *net.UnixConn) {
	pid := peerPID(c)
	log := s.d.Logger.With("trainer_pid", pid)
	refuseTensor := func(code, msg, tensor string) {
		log.Warn("trainer refused", "code", code, "reason", msg)
		c.SetWriteDeadline(time.Now().Add(time.Second))
		b, _ := json.Marshal(errorMsg{Op: "error", Code: code, Message: msg, Tensor: tensor})
		WriteFrame(c, nil, b)
		c.Close()
	}
	refuse := func(code, msg string) { refuseTensor(code, msg, "") }
	c.SetReadDeadline(time.Now().Add(s.cfg.HelloTimeout))
	body, err := ReadFrame(c, nil, s.cfg.MaxFrame)
	if err != nil {
		refuse(CodeProtocol, fmt.Sprintf("reading hello: %v", err))
		return
	}
	m, err := decode(body)
	if err != nil {
		refuse(CodeProtocol, err.Error())
		return
	}
	switch {
	case m.Op != "hello":
		refuse(CodeProtocol, fmt.Sprintf("first message %q, want hello", m.Op))
		return
	case m.Version == nil || *m.Version != Version:
		refuse(CodeVersion, fmt.Sprintf("protocol version %s, this node speaks %d: use the dsspmesh of this node's build (python/ of its repository)", ptrText(intPtr64(m.Version)), Version))
		return
	case m.Role != "" && m.Role != "train":
		refuse(CodeProtocol, fmt.Sprintf("role %q, want train", m.Role))
		return
	}
	s.mu.Lock()
	busy := s.current != nil
	s.mu.Unlock()
	if busy {
		refuse(CodeBusy, "another trainer is attached to this node")
		return
	}
	layout, err := ParseWireLayout(m.Layout)
	if err != nil {
		refuse(CodeLayoutMismatch, err.Error())
		return
	}
	adm, ref := s.d.Admit(layout)
	if ref != nil {
		refuseTensor(ref.Code, ref.Message, ref.Tensor)
		return
	}
	shm, err := s.shmFor(adm.Layout.Total())
	var se *ShmError
	switch {
	case errors.As(err, &se):
		log.Error("trainer refused: the shared-memory file cannot be made", "file", se.Path, "owner", se.Owner, "err", se.Err)
		refuse(CodeShm, err.Error())
		return
	case err != nil:
		refuse(CodeJobMismatch, err.Error())
		return
	}
	if adm.LocalSteps < 1 {
		adm.LocalSteps = 1
	}
	w := welcome{Op: "welcome", Node: s.d.Node, Shm: shm.Path, ShmBytes: shm.Bytes(), Params: shm.P, Layout: WireLayout(adm.Layout),
		Batch: adm.Batch, LocalSteps: adm.LocalSteps, Seed: adm.Seed, Dataset: adm.Dataset, SendInit: adm.SendInit,
		Update: adm.Update, Optimizer: adm.Optimizer, Wire: adm.Wire}
	if w.Update == "" {
		w.Update = UpdateDelta
	}
	b, err := json.Marshal(w)
	if err != nil {
		refuse(CodeProtocol, err.Error())
		return
	}
	c.SetWriteDeadline(time.Now().Add(10 * time.Second))
	if _, err := WriteFrame(c, nil, b); err != nil {
		log.Warn("trainer: welcome", "err", err)
		c.Close()
		return
	}
	if adm.SendInit {
		c.SetReadDeadline(time.Now().Add(s.cfg.InitTimeout))
		body, err := ReadFrame(c, nil, s.cfg.MaxFrame)
		if err == nil {
			m, err = decode(body)
		}
		if err == nil && m.Op != "init" {
			err = fmt.Errorf("op %q, want init", m.Op)
		}
		if err != nil {
			refuse(CodeProtocol, fmt.Sprintf("waiting for init: %v", err))
			return
		}
		if err := s.d.Init(shm.Region(RegionTheta)); err != nil {
			refuse(CodeJobMismatch, err.Error())
			return
		}
	}
	c.SetDeadline(time.Time{})
	s.mu.Lock()
	e := newExternal(c, shm, pid, s.cfg.MaxFrame, s.cfg.GoneGrace, s.cfg.Answers, s.d.Logger)
	s.current = e
	s.mu.Unlock()
	go func() {
		<-e.Done()
		s.mu.Lock()
		if s.current == e {
			s.current = nil
		}
		s.mu.Unlock()
	}()
	log.Info("trainer attached", "socket", s.cfg.Socket, "params", shm.P, "tensors", len(adm.Layout))
	s.d.Attached(e)
}

func (s *Server) shmFor(p int) (*Shm, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.shm != nil {
		if s.shm.P != p {
			return nil, fmt.Errorf("the job has %d parameters, the shared memory %d", p, s.shm.P)
		}
		return s.shm, nil
	}
	shm, err := NewShm(s.cfg.ShmDir, s.cfg.Socket, p)
	if err != nil {
		return nil, err
	}
	s.shm = shm
	return shm, nil
}

// Close stops accepting, ends the attachment with stop reason, and
// removes the socket and the shared-memory file.
func (s *Server) Close(reason string) {
	s.ln.Close()
	s.mu.Lock()
	e, shm := s.current, s.shm
	s.shm = nil
	s.mu.Unlock()
	if e != nil {
		e.Close(reason)
	}
	if shm != nil {
		shm.Close()
	}
}

func intPtr64(p *int) *int64 {
	if p == nil {
		return nil
	}
	v := int64(*p)
	return &v
}
