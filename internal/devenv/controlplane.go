package devenv

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
)

// ControlPlane is a running kube-apiserver and etcd with the CRDs installed.
type ControlPlane struct {
	env *envtest.Environment
	// FrontProxy is the API server's request-header authentication and
	// the aggregator's client certificate, for aggregated API servers.
	FrontProxy *FrontProxy
	// Config is an administrator's client configuration.
	Config *rest.Config
	// Kubeconfig is the path of an administrator's kubeconfig file.
	Kubeconfig string
	kubeconfig []byte
}

// StartControlPlane starts the control plane from the binaries in
// KUBEBUILDER_ASSETS, installs the CRDs found in crdDir (none when empty) and
// writes an administrator kubeconfig into dir. The API server is set up for
// API aggregation as kubeadm sets up a cluster (see FrontProxy).
func StartControlPlane(dir, crdDir string) (*ControlPlane, error) {
	if os.Getenv("KUBEBUILDER_ASSETS") == "" {
		return nil, fmt.Errorf("KUBEBUILDER_ASSETS is not set: run `make envtest` and point it at bin/k8s/<version>")
	}
	env := &envtest.Environment{}
	// A serving directory of our own keeps the API server's certificates
	// and port across RestartAPIServer, so clients need no new kubeconfig.
	certDir := filepath.Join(dir, "kube-apiserver")
	if err := os.MkdirAll(certDir, 0o700); err != nil {
		return nil, fmt.Errorf("create %s: %w", certDir, err)
	}
	env.ControlPlane.GetAPIServer().CertDir = certDir
	fp, err := newFrontProxy(filepath.Join(dir, "front-proxy"))
	if err != nil {
		return nil, err
	}
	for k, v := range fp.apiServerArgs() {
		env.ControlPlane.GetAPIServer().Configure().Set(k, v)
	}
	if crdDir != "" {
		env.CRDDirectoryPaths = []string{crdDir}
		env.ErrorIfCRDPathMissing = true
	}
	if _, err := env.Start(); err != nil {
		return nil, fmt.Errorf("start control plane: %w", err)
	}
	user, err := env.AddUser(envtest.User{Name: "admin", Groups: []string{"system:masters"}}, nil)
	if err != nil {
		_ = env.Stop()
		return nil, fmt.Errorf("add admin user: %w", err)
	}
	kc, err := user.KubeConfig()
	if err != nil {
		_ = env.Stop()
		return nil, fmt.Errorf("admin kubeconfig: %w", err)
	}
	path := filepath.Join(dir, "kubeconfig")
	if err := os.WriteFile(path, kc, 0o600); err != nil {
		_ = env.Stop()
		return nil, fmt.Errorf("write kubeconfig: %w", err)
	}
	return &ControlPlane{env: env, FrontProxy: fp, Config: user.Config(), Kubeconfig: path, kubeconfig: kc}, nil
}

// ImpersonatingKubeconfig writes a kubeconfig that acts as the given user
// (for example "system:serviceaccount:ns:name"), so a process runs with
// exactly that identity's RBAC.
func (c *ControlPlane) ImpersonatingKubeconfig(path, user string) error {
	cfg, err := clientcmd.Load(c.kubeconfig)
	if err != nil {
		return fmt.Errorf("parse kubeconfig: %w", err)
	}
	for _, a := range cfg.AuthInfos {
		a.Impersonate = user
	}
	return clientcmd.WriteToFile(*cfg, path)
}

// RestartAPIServer stops kube-apiserver (etcd keeps running, as it would in
// a cluster whose API server is upgraded or crashes), waits for down, then
// starts it again on the same port with the same certificates and waits
// until it reports ready (its RBAC roles loaded) or ctx ends.
func (c *ControlPlane) RestartAPIServer(ctx context.Context, down time.Duration) error {
	api := c.env.ControlPlane.GetAPIServer()
	if err := api.Stop(); err != nil {
		return fmt.Errorf("stop kube-apiserver: %w", err)
	}
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(down):
	}
	if err := api.Start(); err != nil {
		return fmt.Errorf("start kube-apiserver again: %w", err)
	}
	cs, err := kubernetes.NewForConfig(c.Config)
	if err != nil {
		return fmt.Errorf("client for readyz: %w", err)
	}
	for {
		if ready(ctx, cs.Discovery().RESTClient()) {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("kube-apiserver not ready: %w", ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// ready asks the API server's /readyz once, for at most two seconds, and
// reports whether every check passed.
func ready(ctx context.Context, rc rest.Interface) bool {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	_, err := rc.Get().AbsPath("/readyz").DoRaw(ctx)
	return err == nil
}

// Stop stops the control plane.
func (c *ControlPlane) Stop() error { return c.env.Stop() }
